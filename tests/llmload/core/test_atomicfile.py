"""Atomic file writes: the old version or the new one, never half, and no temporary file left."""

import csv
import os

import pytest

from llmload.core.atomicfile import atomic_write, atomic_write_text
from llmload.core.metrics import RequestResult
from llmload.core.rawlog import read_results, write_results

pytestmark = pytest.mark.unit


def test_a_write_replaces_the_file_whole_and_leaves_only_it(tmp_path):
    path = tmp_path / "sub" / "run.json"
    assert atomic_write_text(path, "old\n") == path
    assert atomic_write_text(path, "new\n") == path
    assert path.read_text(encoding="utf-8") == "new\n"
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]


@pytest.mark.parametrize("failure", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_a_failure_mid_write_keeps_the_old_file_and_no_temporary_file(tmp_path, failure):
    path = tmp_path / "x_stats.csv"
    path.write_text("old\n", encoding="utf-8")
    with pytest.raises(type(failure)):
        with atomic_write(path) as out:
            out.write("half of the new ")
            out.flush()  # the temporary file holds data when the failure comes
            assert len(list(tmp_path.iterdir())) == 2
            raise failure
    assert path.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["x_stats.csv"]


def test_the_raw_log_rewrite_fails_cleanly_too(tmp_path):
    path = tmp_path / "r_requests.jsonl"
    first = RequestResult("0", "qa", "chat", "stream", 1000.0, 0.5, [0.1], output_tokens=1)
    write_results(path, [first])

    def broken():
        yield first
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_results(path, broken())
    assert [r.request_id for r in read_results(path)] == ["0"]
    assert [p.name for p in tmp_path.iterdir()] == ["r_requests.jsonl"]


def test_text_is_utf8_newline_is_opens_and_the_mode_follows_the_umask(tmp_path):
    path = tmp_path / "t.csv"
    with atomic_write(path, newline="") as out:
        csv.writer(out).writerow(["naïve", "1"])
    assert path.read_bytes() == "naïve,1\r\n".encode()  # the csv module's line ends, untranslated
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # a new file's mode, not a temporary file's 0600
