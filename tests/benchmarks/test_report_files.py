"""benchmarks/report_files.py: a scripted run's report files before and after a change."""

from __future__ import annotations

import pytest

from benchmarks.report_files import compare, main
from llmload.core.paths import REPO_ROOT


def write(folder, files: dict[str, str]):
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.unit
def test_additions_are_kept_and_a_lost_column_value_or_line_is_a_change(tmp_path):
    before = write(tmp_path / "b", {"a.csv": "x,y\n1,2\n", "s.md": "# r\none\ntwo\n", "p.png": "\x89PNG1",
                                    "gone.csv": "x\n1\n"})
    after = write(tmp_path / "a", {"a.csv": "x,z,y\n1,9,2\n", "s.md": "# r\none\nnew\ntwo\n", "p.png": "\x89PNG1",
                                   "new.json": "{}"})
    rows, kept = compare(before, after)
    assert dict(rows) == {"a.csv": "same on its 2 columns; 1 columns added",
                          "s.md": "its 3 lines all there, in order; 1 lines added", "p.png": "byte-identical",
                          "gone.csv": "CHANGED: not written any more", "new.json": "new"}
    assert not kept  # gone.csv
    (before / "gone.csv").unlink()
    assert compare(before, after)[1]
    (after / "a.csv").write_text("x,z,y\n1,9,3\n")
    (after / "s.md").write_text("# r\ntwo\none\n")
    (after / "p.png").write_text("\x89PNG2")
    rows, kept = compare(before, after)
    assert not kept and dict(rows)["a.csv"] == "CHANGED: columns lost [], values changed in ['y']"
    assert dict(rows)["s.md"].startswith("CHANGED: 1 of its 3 lines") and dict(rows)["p.png"] == "CHANGED"


@pytest.mark.integration
@pytest.mark.slow
def test_this_checkout_against_itself_is_byte_identical(tmp_path, capsys):
    assert main(["--before", str(REPO_ROOT), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "nothing the before said changed" in out and "CHANGED" not in out
    assert out.count("byte-identical") >= 12 and "| summary.csv " in out and "| latency_qa.png " in out


@pytest.mark.unit
def test_a_folder_that_is_not_a_checkout_is_one_line(tmp_path, capsys):
    assert main(["--before", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: --before {tmp_path} is not a checkout of this suite with its tests\n"
