"""The JSON reader benchmark, end to end on a tiny file cut short like the bundled ShareGPT file."""

from __future__ import annotations

import json
import subprocess
import sys

import ijson

from llmload.core.paths import REPO_ROOT
from llmload.tasks.sources import iter_json_array

from benchmarks.json_reader import OLD, old_iter_json_array


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.json_reader", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_benchmark_prints_every_reader_side_by_side(tmp_path):
    elements = [{"id": f"c{i}", "conversations": [{"from": "human", "value": "hi " * i}]} for i in range(200)]
    text = json.dumps(elements)
    tiny = tmp_path / "tiny.json"
    tiny.write_text(text[:text.index('{"id": "c199"') + 20])  # cut inside the last element
    result = run("--file", str(tiny), "--repeat", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tiny.json: ") and "CPUs" in lines[0] and "best of 2" in lines[0]
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    assert header == ["reader", "elements", "best ms", "elements/s", "speed vs old"]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[3:-1]]
    backends = [b for b in ijson.ALL_BACKENDS if _installed(b)]
    assert [r[0] for r in rows] == [OLD] + [f"ijson {b}" for b in backends] and backends[0] == "yajl2_c"
    assert {r[1] for r in rows} == {"199"}  # every complete element, from every reader
    assert rows[0][4] == "1.00x" and all(float(r[2]) > 0 and r[4].endswith("x") for r in rows)
    assert lines[-1].startswith("fastest ijson backend: ijson ")


def test_both_readers_agree_on_the_bundled_layout(tmp_path):
    elements = [{"id": i, "text": "\u00e9\"\\" * i} for i in range(50)]
    text = json.dumps(elements, indent=1)
    cut = text[:-10]
    path = tmp_path / "cut.json"
    path.write_text(cut, encoding="utf-8")
    with path.open(encoding="utf-8") as handle:
        old = list(old_iter_json_array(handle, chunk_chars=64))
    with path.open("rb") as handle:
        assert list(iter_json_array(handle)) == old == elements[:49]


def test_a_missing_file_is_one_line(tmp_path):
    result = run("--file", str(tmp_path / "none.json"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and lines[-1].endswith(f"error: argument --file: {tmp_path / 'none.json'}: no "
                                                         f"such file") and "Traceback" not in result.stderr


def _installed(backend: str) -> bool:
    try:
        ijson.get_backend(backend)
        return True
    except ImportError:
        return False
