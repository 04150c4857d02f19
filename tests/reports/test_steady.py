"""The steady window: MSER-5 on scripted series, a scripted ramp with a known plateau, the report's section,
and a real Locust run against the mock engine with --stages."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results, write_results
from llmload.core.records import PromptRecord, write_records
from reports.steady import MAX_BINS, find_window, mser_cut, steady_summary
from benchmarks.steady_window import E2E, TOKENS, TTFT, closed_ramp
from report_helpers import REPO, ScriptedRun, read_csv, run_module, start_mock


@pytest.mark.unit
def test_mser_cuts_a_step_and_nothing_of_a_flat_series():
    rng = np.random.default_rng(1)
    step = np.concatenate([np.full(50, 2.0), np.full(150, 8.0)]) + rng.normal(0, 0.3, 200)
    assert mser_cut(step) == 50
    assert mser_cut(np.full(200, 8.0) + rng.normal(0, 0.3, 200)) == 0
    assert mser_cut(np.full(200, 4.0)) == 0
    ramp = np.linspace(0.0, 10.0, 200) + rng.normal(0, 0.3, 200)
    assert mser_cut(ramp) is None  # never settles: no steady state
    assert mser_cut(np.ones(40)) is None  # too few batches to tell


@pytest.mark.unit
@pytest.mark.parametrize("users, ramp_s, plateau_s", [(8, 20.0, 60.0), (16, 30.0, 30.0), (4, 10.0, 80.0)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_window_of_a_closed_ramp(users, ramp_s, plateau_s, seed):
    results = closed_ramp(users, ramp_s, plateau_s, seed)
    window, reason = find_window(results)
    assert window is not None, reason
    span = ramp_s + plateau_s
    start, end = window.start - window.first, window.end - window.first
    # stated tolerance: the window starts no earlier than one bin before the ramp's end and at most 3 % of the
    # run after it; it ends within 3 % of the run (and one request's latency) of the last dispatch
    assert ramp_s - span / MAX_BINS <= start <= ramp_s + 0.03 * span, (start, ramp_s)
    assert span - 0.03 * span - E2E <= end <= span + 1e-6, (end, span)
    latency, delivered = steady_summary(results, window)
    true_rate = users / (E2E * 1.05)  # requests/s at the plateau (mean jitter 5 %)
    assert delivered.request_throughput == pytest.approx(true_rate, rel=0.03)
    assert delivered.output_token_throughput == pytest.approx(true_rate * TOKENS, rel=0.03)
    whole = summarize(results)
    assert whole.request_throughput < 0.95 * delivered.request_throughput  # the ramp and drain pulled it down
    assert latency.get("ttft", "p50") == pytest.approx(TTFT * 1.05, rel=0.05)


@pytest.mark.unit
def test_too_short_and_unsettled_cells_have_no_window():
    window, reason = find_window(closed_ramp(2, 0.5, 1.0))
    assert window is None and reason.startswith("too short"), reason
    ramp_only = closed_ramp(32, 80.0, 0.5)
    window, reason = find_window(ramp_only)
    assert window is None and "did not settle" in reason, reason


@pytest.mark.integration
@pytest.mark.slow
def test_the_report_shows_the_window_beside_the_whole_run(tmp_path):
    run = ScriptedRun(tmp_path / "run")
    run.add("mock", "qa", "stream", 8, closed_ramp(8, 20.0, 60.0))
    run.add("mock", "qa", "stream", 2, closed_ramp(2, 0.5, 1.0))
    proc = run_module("reports.merge", run.path, "--no-tokenizer")
    assert proc.returncode == 0, proc.stderr
    rows = {row["concurrency"]: row for row in read_csv(run.path / "report" / "steady.csv")}
    ramp = rows["8"]
    assert 19.8 <= float(ramp["window_start_s"]) <= 22.4 and 77.0 <= float(ramp["window_end_s"]) <= 80.0
    assert float(ramp["steady_request_throughput"]) > 1.05 * float(ramp["whole_request_throughput"])
    assert 80 < float(ramp["share_pct"]) < 92  # the plateau's requests of all (about 86 %)
    assert rows["2"]["reason"].startswith("too short") and rows["2"]["window_start_s"] == ""
    text = (run.path / "report" / "summary.md").read_text()
    section = text.split("## Steady state", 1)[1]
    assert "mock qa stream c8" in section and "too short" in section
    assert "out tok/s (run)" in section and "out tok/s (steady)" in section


@pytest.mark.integration
def test_the_command_prints_the_window_of_a_raw_log(tmp_path):
    path = tmp_path / "ramp_requests.jsonl"
    write_results(path, closed_ramp(8, 20.0, 60.0))
    proc = run_module("reports.steady", path)
    assert proc.returncode == 0, proc.stderr
    assert "ramp" in proc.stdout and " s of " in proc.stdout
    bad = run_module("reports.steady", tmp_path / "missing_requests.jsonl")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_a_mock_run_with_stages_has_its_plateau_found(tmp_path):
    """Locust against the mock engine: 2 users for 4 s, then 8 for 12 s. The window starts at the step and the
    steady throughput keeps Little's law at 8 requests in flight. The mock's delays (TTFT 200 ms, ITL 20 ms: 0.8 s a
    request) are long beside the CPU time a request takes, so that other work on the cores (the parallel tests)
    does not move the throughput: with 50 and 5 ms it once never settled in a CI run."""
    url, server = start_mock(tmp_path, ttft_ms=200, itl_ms=20)
    try:
        prompts = tmp_path / "chat.jsonl"
        write_records(prompts, [PromptRecord(id=f"chat-{i}", task="chat", source="test", prompt=f"q {i}",
                                             messages=({"role": "user", "content": f"q {i}"},), max_tokens=32,
                                             input_tokens=4) for i in range(8)])
        prefix = tmp_path / "stages"
        proc = subprocess.run([sys.executable, "-m", "locust", "-f", str(REPO / "locustfiles" / "chat.py"),
                               "--headless", "--only-summary", "-H", url, "--stages", "4s:2,12s:8", "-r", "50",
                               "--csv", str(prefix), "--max-tokens", "32", "--ignore-eos", "--dataset",
                               str(prompts), "--model", "mock", "--loglevel", "WARNING"],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    finally:
        server.stop()
    results = read_results(f"{prefix}_requests.jsonl")
    run = ScriptedRun(tmp_path / "run")
    run.add("mock", "chat", "stream", 8, results)
    merged = run_module("reports.merge", run.path, "--no-tokenizer")
    assert merged.returncode == 0, merged.stderr
    row = read_csv(run.path / "report" / "steady.csv")[0]
    assert row["reason"] == "", row["reason"]
    # at the step (4 s) on a quiet machine; other work on the 2 cores blurs the step and MSER cuts later: after
    # the ramp, inside the plateau (4-16 s), with at least its last quarter
    start, end = float(row["window_start_s"]), float(row["window_end_s"])
    assert 3.5 <= start <= 13.0 and start < end <= 16.5, (start, end)
    window, _ = find_window(results)
    inside = [r for r in window.ended_in(results) if r.success]
    in_flight = sum(r.end_offset for r in window.started_in(results)) / window.duration  # Little's law: L
    assert in_flight == pytest.approx(8.0, rel=0.1)
    rate = float(row["steady_request_throughput"])
    mean_e2e = float(np.mean([r.end_offset for r in inside]))
    assert rate == pytest.approx(8.0 / mean_e2e, rel=0.15)  # lambda = L / W
    assert rate > 1.1 * float(row["whole_request_throughput"])
    (tmp_path / "figures.json").write_text(json.dumps(row))
