"""Offered rates, sweeps, capacity searches, repeats, warm-up and --throughput-only, end to end on the mock."""

from __future__ import annotations

import json

import pytest

from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_capacity, read_cells
from llmload.runner.cell import loadgen_flags
from llmload.runner.plan import sweep_rates
from prompt_sets import make_data
from runner_helpers import run_runner

pytestmark = pytest.mark.skipif("--rate" not in loadgen_flags(),
                                reason="the load generator has no --rate yet (python -m llmload.loadgen)")


def base_args(tmp_path, *more: str) -> list[str]:
    data = make_data(tmp_path / "data", n=40)
    return ["--servers", "mock", "--tasks", "qa", "--modes", "stream", "--data-dir", str(data),
            "--out", str(tmp_path / "run"), "--arrival", "constant", "--no-report", *more]


def test_rates_beside_levels_with_repeats_and_warmup(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_runner(*base_args(tmp_path, "--concurrency", "2", "--rates", "8,16", "--repeat", "2", "--requests",
                                 "12", "--warmup", "2", "--max-tokens", "4", "--mock-ttft-ms", "30", "--mock-itl-ms",
                                 "5"), merged=True)
    assert proc.returncode == 0, proc.stdout
    cells = read_cells(run_dir)
    assert [(c.concurrency, c.rate, c.repeat, c.status) for c in cells] == [
        (2, None, 0, "ok"), (2, None, 1, "ok"), (12, 8.0, 0, "ok"), (12, 8.0, 1, "ok"), (12, 16.0, 0, "ok"),
        (12, 16.0, 1, "ok")]
    assert [c.prefix for c in cells[2:4]] == ["mock/qa_stream_r8_rep1", "mock/qa_stream_r8_rep2"]
    assert "[3/6] mock qa stream rate=8/s pool=12 #1: 10 req, 0 failed" in proc.stdout
    for cell in cells:
        raw = read_results(run_dir / f"{cell.prefix}_requests.jsonl")
        assert len(raw) == 12 and sum(r.warmup for r in raw) == 2  # sent, then left out
        summary = summarize(raw)
        assert summary.requests == 10 and summary.failures == 0
        if cell.rate is None:
            assert all(r.intended_start is None for r in raw)
            continue
        starts = sorted(r.intended_start for r in raw)
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert all(abs(g - 1 / cell.rate) < 0.2 / cell.rate for g in gaps), gaps  # constant arrivals
        assert summary.get("dispatch_lag", "p99") < 0.25  # the pool of 12 never ran dry
        assert 0.6 * cell.rate < summary.request_throughput < 1.4 * cell.rate
    info = json.loads((run_dir / "run.json").read_text())
    assert info["settings"]["arrival"] == "constant" and info["plan"]["rates"] == [8.0, 16.0]


def test_a_sweep_runs_evenly_spaced_rates_up_to_the_saturation_throughput(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_runner(*base_args(tmp_path, "--sweep", "3", "--pool", "2", "--requests", "12", "--max-tokens", "4",
                                 "--mock-ttft-ms", "40", "--mock-itl-ms", "5"), merged=True)
    assert proc.returncode == 0, proc.stdout
    saturation, *swept = read_cells(run_dir)
    assert (saturation.prefix, saturation.concurrency, saturation.rate, saturation.phase) == (
        "mock/sweep/qa_stream_c2", 2, None, "sweep")
    measured = summarize(read_results(run_dir / f"{saturation.prefix}_requests.jsonl")).request_throughput
    assert 5 < measured < 2 / 0.055 * 1.1  # two users, 55 ms per request at best
    assert [c.rate for c in swept] == sweep_rates(measured, 3) and {c.phase for c in swept} == {"sweep"}
    assert all(c.status == "ok" and c.concurrency == 2 for c in swept)
    assert "(saturation)" in proc.stdout and "[4/4] mock qa stream rate=" in proc.stdout


def test_find_capacity_brackets_the_rate_a_pool_of_two_users_can_hold(tmp_path):
    """Two users and about 100 ms per request hold about 2 / 0.1 = 20 req/s; above, requests go out late.

    (The report of sweeps and searches is the reports' to test: these runs skip it.)
    """
    run_dir = tmp_path / "run"
    proc = run_runner(*base_args(tmp_path, "--find-capacity", "--slo", "e2e=300", "--max-lag", "60", "--pool", "2",
                                 "--requests", "30", "--max-tokens", "4", "--mock-ttft-ms", "80", "--mock-itl-ms",
                                 "5", "--capacity-steps", "5"), merged=True, timeout=900)
    assert proc.returncode == 0, proc.stdout
    cells = read_cells(run_dir)
    saturation, steps = cells[0], cells[1:]
    assert saturation.phase == "capacity" and saturation.rate is None and 1 <= len(steps) <= 5
    sat_summary = summarize(read_results(run_dir / f"{saturation.prefix}_requests.jsonl"))
    pool_bound = 2 / sat_summary.get("e2e", "p50")
    (entry,) = read_capacity(run_dir)
    assert set(entry) == {"server", "task", "mode", "slo", "slo_target", "capacity_rps", "bracket",
                          "saturation_rps", "steps"}
    assert (entry["server"], entry["task"], entry["mode"], entry["slo"], entry["slo_target"]) == (
        "mock", "qa", "stream", {"e2e": 300.0}, 99.0)
    assert entry["saturation_rps"] == pytest.approx(sat_summary.request_throughput)
    low, high = entry["bracket"]
    capacity = entry["capacity_rps"]
    assert capacity is not None and capacity == low and (high is None or high > low)
    assert 0.4 * pool_bound <= capacity <= 1.3 * pool_bound, (capacity, pool_bound, entry["steps"])
    assert [s["prefix"] for s in entry["steps"]] == [c.prefix for c in steps]
    assert [s["rate"] for s in entry["steps"]] == [c.rate for c in steps]
    for step in entry["steps"]:
        assert set(step) == {"rate", "attainment", "goodput", "lag_p99_ms", "prefix"}
        held = step["attainment"] >= 99.0 and step["lag_p99_ms"] <= 60.0
        assert held == (step["rate"] <= low), entry["steps"]
    assert f"capacity mock qa stream under e2e<=300ms at 99 %: {capacity:g} req/s" in proc.stdout


def test_throughput_only_sends_sync_requests_and_reports_rates(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "mock", "--tasks", "qa", "--concurrency", "2", "--requests", "4",
                      "--max-tokens", "4", "--throughput-only", "--data-dir", str(make_data(tmp_path / "data")),
                      "--out", str(run_dir), "--mock-ttft-ms", "10", "--mock-itl-ms", "2", "--no-report", merged=True)
    assert proc.returncode == 0, proc.stdout
    (cell,) = read_cells(run_dir)
    assert cell.mode == "sync" and cell.status == "ok"
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("[1/1]")]
    assert " req/s, " in line and "E2E" not in line and "TTFT" not in line
