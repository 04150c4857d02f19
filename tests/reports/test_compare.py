"""reports.compare on real mock runs (known TTFT), scripted runs (failed cells, capacity) and bad input."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from llmload.core.sequential import interval_at
from llmload.core.stats import CALIBRATED, WITHIN_RUN
from reports.compare import main
from report_helpers import ScriptedRun, closed_loop, read_csv, run_module, searched, write_calibration

pytestmark = pytest.mark.integration


def compared(run_a, run_b, out, *options) -> list[dict]:
    proc = run_module("reports.compare", run_a, run_b, "--out", out, *options)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out / "compare.md")
    return read_csv(out / "compare.csv")


def calibrated(runs, tmp_path) -> tuple[str, str]:
    """``--calibration FILE``: a run-to-run spread of 3 % per figure of the mock, measured on the runs' machine."""
    return "--calibration", str(write_calibration(tmp_path / "calibration.json", ("mock",), runs["a"], sd=0.03))


# The mock runs these four share are compared under a calibration of 3 % run to run, which holds when the runs
# are made alone: beside a vLLM start on the two cores, identical runs differed by more (so: serial).
@pytest.mark.serial
def test_a_real_2x_ttft_is_significant(mock_runs, tmp_path):
    rows = compared(mock_runs["a"], mock_runs["slow"], tmp_path, *calibrated(mock_runs, tmp_path))
    ttft = [r for r in rows if r["metric"] == "ttft_p50"]
    assert len(ttft) == 2
    for r in ttft:
        assert 1.7 < float(r["ratio"]) < 2.2 and r["significant"] == "True", r
        assert float(r["ci_low"]) <= float(r["ratio"]) <= float(r["ci_high"]) and r["method"] == "paired"
        assert int(r["pairs"]) == 16 and r["covers"] == CALIBRATED
    assert all(r["significant"] == "True" for r in rows if r["metric"] in ("e2e_p50", "output_token_throughput"))
    md = (tmp_path / "compare.md").read_text()
    assert "| mock qa stream c1 | TTFT p50 ms" in md and "Run-to-run variation: calibration" in md
    assert (tmp_path / "compare_ratios.png").stat().st_size > 1000


@pytest.mark.serial
def test_without_a_calibration_single_runs_are_not_judged(mock_runs, tmp_path):
    rows = compared(mock_runs["a"], mock_runs["slow"], tmp_path)
    ttft = [r for r in rows if r["metric"] == "ttft_p50"]
    assert ttft and all(float(r["ci_low"]) > 1 and r["covers"] == WITHIN_RUN and r["significant"] == "" for r in ttft)
    assert "not judged significant" in (tmp_path / "compare.md").read_text()


@pytest.mark.serial
def test_identical_setups_are_not_significant(mock_runs, tmp_path):
    rows = compared(mock_runs["a"], mock_runs["same"], tmp_path, *calibrated(mock_runs, tmp_path))
    judged = [r for r in rows if r["significant"] in ("True", "False")]
    assert len(judged) >= 8
    assert not [r for r in judged if r["metric"] in ("ttft_p50", "e2e_p50") and r["significant"] == "True"]
    assert sum(r["significant"] == "True" for r in judged) <= 1, [r for r in judged if r["significant"] == "True"]
    too_few = [r for r in rows if r["metric"] == "ttft_p99"]
    assert too_few and all(r["ci_low"] == "" and r["significant"] == "" for r in too_few)  # 16 < 368


@pytest.mark.serial
def test_default_output_folder_is_run_b_compare(mock_runs):
    assert main([str(mock_runs["a"]), str(mock_runs["same"])]) == 0
    assert (mock_runs["same"] / "compare" / "compare.md").is_file()
    assert (mock_runs["same"] / "compare" / "compare.csv").is_file()


def scripted(path, ttft=0.05, failed_c4=False, capacity=None) -> ScriptedRun:
    run = ScriptedRun(path)
    rng = np.random.default_rng(zlib.crc32(path.name.encode()))
    run.add("basic", "qa", "stream", 1, closed_loop(ttft * rng.uniform(0.95, 1.05, 12), 1, prompts=12))
    if failed_c4:
        run.add("basic", "qa", "stream", 4, None, status="failed", error="server died during the cell")
    else:
        run.add("basic", "qa", "stream", 4, closed_loop(ttft * rng.uniform(0.95, 1.05, 12), 4, prompts=12))
    for entry in capacity or []:
        with (run.path / "capacity.jsonl").open("a") as out:
            out.write(json.dumps(entry) + "\n")
    return run


def test_failed_cells_are_left_out_and_listed(tmp_path):
    a = scripted(tmp_path / "a", failed_c4=True)
    b = scripted(tmp_path / "b")
    rows = compared(a.path, b.path, tmp_path / "out")
    assert {(r["server"], r["concurrency"]) for r in rows} == {("basic", "1")}
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "## Not compared" in md and "- basic qa stream c4: failed in A (server died during the cell)" in md


def capacity_entry(server, capacity, bracket):
    return {"server": server, "task": "qa", "mode": "stream", "slo": {"ttft": 1000.0}, "slo_target": 99.0,
            "capacity_rps": capacity, "bracket": bracket, "saturation_rps": None,
            "steps": [{"rate": r, "attainment": 100.0, "goodput": r, "lag_p99_ms": 1.0, "prefix": ""}
                      for r in bracket]}


def test_capacity_results_are_compared_by_their_brackets(tmp_path):
    a = scripted(tmp_path / "a", capacity=[capacity_entry("basic", 2.0, [2.0, 2.5])])
    b = scripted(tmp_path / "b", capacity=[capacity_entry("basic", 4.0, [4.0, 5.0])])
    rows = [r for r in compared(a.path, b.path, tmp_path / "out") if r["metric"] == "capacity_rps"]
    assert len(rows) == 1
    (row,) = rows
    assert float(row["ratio"]) == 2.0 and row["method"] == "brackets"
    assert (float(row["ci_low"]), float(row["ci_high"])) == (4.0 / 2.5, 5.0 / 2.0) and row["significant"] == "True"
    assert "## Capacity at SLO" in (tmp_path / "out" / "compare.md").read_text()
    c = scripted(tmp_path / "c", capacity=[capacity_entry("basic", 2.0, [2.0, 3.0])])
    (same,) = [r for r in compared(a.path, c.path, tmp_path / "out2") if r["metric"] == "capacity_rps"]
    assert same["significant"] == "False"


def test_capacities_with_intervals_are_compared_by_them(tmp_path):
    a = scripted(tmp_path / "a", capacity=[searched(4.1, 8.0, "basic")])
    b = scripted(tmp_path / "b", capacity=[searched(8.3, 8.0, "basic")])
    (row,) = [r for r in compared(a.path, b.path, tmp_path / "out") if r["metric"] == "capacity_rps"]
    low_a, high_a = interval_at(json.loads((a.path / "capacity.jsonl").read_text()), 0.975)
    low_b, high_b = interval_at(json.loads((b.path / "capacity.jsonl").read_text()), 0.975)
    assert row["method"] == "capacity intervals, 97.5 % each" and row["significant"] == "True"
    assert (float(row["ci_low"]), float(row["ci_high"])) == pytest.approx((low_b / high_a, high_b / low_a))
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| basic qa stream    | ttft<=1000ms | 4." in md and "capacity intervals, 97.5 % each" in md


@pytest.mark.slow
def test_folders_that_are_not_runs_are_one_line(tmp_path):
    a = scripted(tmp_path / "a")
    (tmp_path / "empty").mkdir()
    for args in ((a.path, tmp_path / "empty"), (tmp_path / "nowhere", a.path)):
        proc = run_module("reports.compare", *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    proc = run_module("reports.compare", a.path, tmp_path / "empty")
    assert "has no cells.jsonl" in proc.stderr


def test_runs_that_share_no_cell_say_what_each_holds(tmp_path):
    a = scripted(tmp_path / "a")
    b = ScriptedRun(tmp_path / "b")
    b.add("vllm", "chat", "sync", 2, closed_loop([0.1] * 6, 2))
    proc = run_module("reports.compare", a.path, b.path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: the runs share no completed cell")
    assert "basic qa stream c1,c4" in line and "vllm chat stream" not in line and "vllm chat sync c2" in line
