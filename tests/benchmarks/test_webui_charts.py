"""The charts benchmark end to end on a small page: real Chromium, both ways' scripts from git, the table."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess

import pytest

from benchmarks.webui_charts import ECHARTS_REVISION, main
from llmload.core.paths import REPO_ROOT

pytestmark = [
    pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium on PATH (Debian's chromium package)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="Playwright is not installed"),
    pytest.mark.skipif(subprocess.run(["git", "cat-file", "-e", ECHARTS_REVISION], cwd=REPO_ROOT,
                                      capture_output=True).returncode != 0,
                       reason=f"the ECharts commit {ECHARTS_REVISION[:12]} is not in this clone's history"),
]


@pytest.mark.e2e
def test_the_benchmark_measures_both_ways(capsys):
    assert main(["--points", "30", "--loads", "1", "--polls", "2"]) == 0
    out = capsys.readouterr().out
    assert "| SVG (hand-written)" in out and "| ECharts" in out
    rows = {line.split("|")[1].strip(): line.split("|")[2:5] for line in out.splitlines() if line.startswith("| ")}
    for label in ("script bytes (gzip)", "30 points: load to drawn, ms", "30 points: JS heap, MB",
                  "30 points: poll: main thread, ms"):
        svg, echarts, ratio = (cell.strip() for cell in rows[label])
        assert float(svg.split()[0].replace(",", "")) > 0 and float(echarts.split()[0].replace(",", "")) > 0, label
    assert float(rows["script bytes (gzip)"][2].strip().rstrip("x")) > 10  # the library is the bulk


@pytest.mark.integration
def test_a_revision_without_the_script_is_one_line(capsys):
    assert main(["--svg", ECHARTS_REVISION, "--points", "30"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--svg REV" in err
