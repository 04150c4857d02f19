"""The merged report of one run: columns from the catalogue, ratios baseline over server, plots from rows."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from llmload.core.metrics import column_title, headline_columns, ratio, summarize, summary_columns
from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_cells
from monitors.sampler import PEAK_KEYS
from reports.merge import IDENTITY, TRAILER, build_report, main, merge_run
from reports.plots import write_plots
from reports.run import load_run
from report_helpers import ScriptedRun, closed_loop, read_csv, run_module, write_calibration


def as_float(text: str) -> float | None:
    return None if text in ("", None) else float(text)


def two_servers(path, baseline_in_manifest: str | None = None) -> ScriptedRun:
    """``vllm`` at TTFT 100 ms and ``basic`` at 50 ms, the same 8 prompts, stream, 1 and 4 users."""
    run = ScriptedRun(path, {"baseline": baseline_in_manifest} if baseline_in_manifest else {})
    rng = np.random.default_rng(7)
    for server, ttft in (("basic", 0.05), ("vllm", 0.10)):
        for users in (1, 4):
            run.add(server, "qa", "stream", users, closed_loop(ttft * rng.uniform(0.9, 1.1, 24), users, prompts=8))
    return run


@pytest.mark.integration
def test_real_run_columns_are_the_catalogue_and_the_values_summarize(pair_run, tmp_path):
    merge_run(pair_run, tmp_path)
    rows = read_csv(tmp_path / "summary.csv")
    columns = list(rows[0])
    assert columns[:len(IDENTITY)] == IDENTITY and columns[-len(TRAILER):] == TRAILER
    assert [c for c in columns if c in summary_columns()] == summary_columns()
    assert [c for c in columns if c in PEAK_KEYS] == list(PEAK_KEYS)
    cells = read_cells(pair_run)
    assert len(rows) == len(cells) == 8
    for row, cell in zip(rows, cells):
        assert (row["server"], row["mode"], int(row["concurrency"])) == (cell.server, cell.mode, cell.concurrency)
        flat = summarize(read_results(cell.files(pair_run).raw_log)).flat()
        for column in ("requests", "e2e_p50", "output_token_throughput", "ttft_p50", "tpot_mean"):
            expected = flat[column]
            assert (as_float(row[column]) is None) if expected is None else \
                as_float(row[column]) == pytest.approx(expected), column
        assert row["token_source"] == "usage"
    md = (tmp_path / "summary.md").read_text()
    for column in ("request_throughput", "e2e_p50", "ttft_p99"):
        assert column_title(column) in md


@pytest.mark.integration
def test_real_run_ratios_are_baseline_over_server(pair_run, tmp_path):
    merge_run(pair_run, tmp_path, calibration=write_calibration(tmp_path / "cal.json", ("mock", "vllm"), pair_run))
    rows = {(r["server"], r["mode"], r["concurrency"]): r for r in read_csv(tmp_path / "summary.csv")}
    ratios = read_csv(tmp_path / "ratios.csv")
    assert {r["ratio"] for r in ratios} == {"vllm / mock"}
    ttft = [r for r in ratios if r["metric"] == "ttft_p50"]
    assert len(ttft) == 2  # the two stream cells
    for r in ttft:
        top, bottom = rows[("vllm", r["mode"], r["concurrency"])], rows[("mock", r["mode"], r["concurrency"])]
        assert float(r["value"]) == pytest.approx(ratio(float(top["ttft_p50"]), float(bottom["ttft_p50"])))
        # 100 ms over 50 ms: the client's own overhead pulls it under 2; above 2 only when the cells met
        # different loads on the machine (CI: 2.24 beside a vLLM start)
        assert 1.6 < float(r["value"]) < 2.5
        assert r["significant"] == "True" and r["method"] == "paired" and r["pairs"] == "16"
        assert float(r["ci_low"]) <= float(r["value"]) <= float(r["ci_high"])
    md = (tmp_path / "summary.md").read_text()
    assert "## Ratios: vllm over each server" in md and "vllm / mock" in md


@pytest.mark.unit
def test_baseline_option_turns_the_ratios_around(tmp_path):
    run = two_servers(tmp_path / "run")
    assert main([str(run.path), "--baseline", "basic", "--out", str(tmp_path / "r")]) == 0
    ratios = read_csv(tmp_path / "r" / "ratios.csv")
    assert {r["ratio"] for r in ratios} == {"basic / vllm"}
    ttft = [float(r["value"]) for r in ratios if r["metric"] == "ttft_p50"]
    assert ttft and all(0.4 < v < 0.6 for v in ttft)


@pytest.mark.unit
def test_run_json_baseline_is_the_default(tmp_path):
    run = two_servers(tmp_path / "run", baseline_in_manifest="basic")
    merge_run(run.path, tmp_path / "r")
    assert {r["ratio"] for r in read_csv(tmp_path / "r" / "ratios.csv")} == {"basic / vllm"}


@pytest.mark.integration
def test_unknown_baseline_is_one_line_listing_the_servers(tmp_path):
    run = two_servers(tmp_path / "run")
    proc = run_module("reports.merge", run.path, "--baseline", "sglang")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --baseline sglang: the run has no server of that name (servers: basic, vllm)"]


@pytest.mark.parametrize("make", ["missing", "empty"])
@pytest.mark.integration
def test_a_folder_that_is_not_a_run_is_one_line(tmp_path, make):
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    proc = run_module("reports.merge", target)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and str(target) in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.unit
def test_markdown_headline_columns_and_empty_ones_left_out(tmp_path):
    run = two_servers(tmp_path / "run")
    md = merge_run(run.path, tmp_path / "r").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| server"))
    for column in ("requests", "request_throughput", "ttft_p50", "e2e_p99"):
        assert column_title(column) in header
    for column in ("dispatch_lag_p99", "slo_attainment", "goodput"):  # closed loop, no SLO: not measured
        assert column in headline_columns() and column_title(column) not in header


@pytest.mark.unit
def test_plots_are_drawn_from_the_merged_rows_alone(tmp_path):
    run = two_servers(tmp_path / "run")
    report = build_report(load_run(run.path))
    shutil.rmtree(run.path)  # nothing of the run is left to read
    out = tmp_path / "plots"
    out.mkdir()
    written = write_plots(report.rows, report.ratios, out, baseline=report.baseline)
    assert {p.name for p in written} >= {"latency_qa.png", "token_throughput.png", "memory.png",
                                         "throughput_ratio.png"}
    assert all(p.stat().st_size > 1000 for p in written)
