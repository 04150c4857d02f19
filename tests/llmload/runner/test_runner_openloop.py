"""Offered rates, sweeps, capacity searches, repeats, warm-up and --throughput-only, end to end on the mock."""

from __future__ import annotations

import json

import pytest

from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_capacity, read_cells
from llmload.runner.plan import sweep_rates
from trace_files import assert_replayed, write_trace
from prompt_sets import make_data
from runner_helpers import run_runner

pytestmark = pytest.mark.integration


def base_args(tmp_path, *more: str) -> list[str]:
    data = make_data(tmp_path / "data", n=40)
    return ["--servers", "mock", "--tasks", "qa", "--modes", "stream", "--data-dir", str(data),
            "--out", str(tmp_path / "run"), "--arrival", "constant", "--no-report", *more]


# not serial: the gaps are the schedule's, the bounds loose (lag p99 under 250 ms, rates within 40 %);
# they held in 3 runs of 3 runner tests at once at load 5 on 2 cores
@pytest.mark.slow
def test_rates_beside_levels_with_repeats_and_warmup(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_runner(*base_args(tmp_path, "--concurrency", "2", "--rates", "8,16", "--repeat", "2", "--requests",
                                 "12", "--warmup", "2", "--max-tokens", "4", "--mock-ttft-ms", "30", "--mock-itl-ms",
                                 "5"), merged=True)
    assert proc.returncode == 0, proc.stdout
    cells = sorted(read_cells(run_dir), key=lambda c: (c.rate or 0, c.repeat))
    assert [(c.concurrency, c.rate, c.repeat, c.status) for c in cells] == [
        (2, None, 0, "ok"), (2, None, 1, "ok"), (12, 8.0, 0, "ok"), (12, 8.0, 1, "ok"), (12, 16.0, 0, "ok"),
        (12, 16.0, 1, "ok")]
    assert [c.prefix for c in cells[2:4]] == ["mock/qa_stream_r8_rep1", "mock/qa_stream_r8_rep2"]
    assert [c.block for c in cells] == [1, 2, 1, 2, 1, 2]  # each repeat in its own block
    assert any(line.startswith("[") and " mock qa stream rate=8/s pool=12 #1: 10 req, 0 failed" in line
               for line in proc.stdout.splitlines()), proc.stdout
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


# not serial: the saturation only between 5 and 40 req/s; it held in 3 runs of 3 runner tests at once at load 5
@pytest.mark.slow
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
    assert sorted(c.rate for c in swept) == sweep_rates(measured, 3) and {c.phase for c in swept} == {"sweep"}
    assert all(c.status == "ok" and c.concurrency == 2 for c in swept)
    assert [c.block for c in [saturation, *swept]] == [1, 2, 2, 2]  # the sweep's rates: one block, shuffled
    assert "(saturation)" in proc.stdout and "[4/4] mock qa stream rate=" in proc.stdout


@pytest.mark.serial  # arrival gaps, lag and the measured capacity
@pytest.mark.slow
def test_find_capacity_of_a_server_of_known_capacity(tmp_path, server_factory):
    """5 slots of 250 ms (230 ms to the first token, then one more 20 ms later) hold exactly 5 / 0.25 = 20 req/s.

    Constant arrivals, an SLO of e2e <= 400 ms for 90 % of requests: the search starts from the saturation run's
    completion rate (within 5 % of 20), the capacity's 95 % interval holds 20, its value is within 10 % of it, and
    it stopped within the +-5 % asked or on its step budget; every step that failed was above 20 req/s, every one
    that held had its floor (its rate less the bound on its queue's growth) below it.
    """
    slots, service_s = 5, 0.25
    known = slots / service_s
    url = server_factory("mock", "--mock-slots", str(slots), "--mock-ttft-ms", "230", "--mock-itl-ms", "20",
                         "--log-level", "warning")
    run_dir = tmp_path / "run"
    proc = run_runner(*base_args(tmp_path, "--find-capacity", "--slo", "e2e=400", "--slo-target", "90",
                                 "--requests", "40", "--pool", "40", "--max-tokens", "2", "--capacity-steps", "6",
                                 "--capacity-looks", "4", "--max-lag", "100", "--capacity-ci", "5"),
                      "--servers", f"known={url}", merged=True, timeout=900)
    assert proc.returncode == 0, proc.stdout
    (entry,) = read_capacity(run_dir)
    value, low, high = entry["capacity_rps"], entry["ci_low"], entry["ci_high"]
    assert high is not None and low <= known <= high, (value, low, high, entry["steps"])
    assert abs(value / known - 1) <= 0.10, (value, entry["steps"])
    assert abs(entry["start"]["rate"] / known - 1) <= 0.05 and entry["ci_target_pct"] == 5.0
    assert entry["stopped"] in ("the interval is within +-5 %", "--capacity-steps 6 rates tried"), entry["stopped"]
    # a hold needs 53 requests, all meeting the SLO, at the first step's first look (alpha = 0.05 / 2 / 2 / 3)
    assert entry["steps"][0]["sizes"][0] == 53
    assert (entry["server"], entry["task"], entry["slo"], entry["slo_target"], entry["confidence"]) == (
        "known", "qa", {"e2e": 400.0}, 90.0, 0.95)
    assert entry["budget"] == {"steps": 6, "looks": 4, "confidence": 0.95, "tests": 3, "spending": "halving",
                               "alpha": pytest.approx(0.05 / 32 / 8 / 3), "first_alpha": pytest.approx(0.05 / 12)}
    cells = read_cells(run_dir)
    saturation, steps = cells[0], cells[1:]
    assert saturation.phase == "capacity" and saturation.rate is None and saturation.concurrency == 40
    assert entry["saturation_rps"] == pytest.approx(
        summarize(read_results(run_dir / f"{saturation.prefix}_requests.jsonl")).request_throughput)
    looks = [x for step in entry["steps"] for x in step["looks"]]
    assert [x["prefix"] for x in looks] == [c.prefix for c in steps]
    for step in entry["steps"]:
        assert step["decision"] in ("held", "failed", "undecided") and step["reason"]
        assert step["attainment_low"] <= step["attainment"] <= step["attainment_high"]
        assert step["requests"] == sum(x["requests"] for x in step["looks"])
        assert [x["requests"] for x in step["looks"]] == step["sizes"][:len(step["looks"])]
        if step["decision"] == "held":  # a short step just past 20 req/s may hold, but its floor stays below
            assert step["floor"] <= known
        if step["decision"] == "failed":
            assert step["rate"] > known * 0.99
        assert step["looks"][0]["trends"][0]["series"] == "backlog"
    assert f"capacity known qa stream under e2e<=400ms at 90 %: {value:.4g} req/s" in proc.stdout


def test_throughput_only_sends_sync_requests_and_reports_rates(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "mock", "--tasks", "qa", "--concurrency", "2", "--requests", "4",
                      "--max-tokens", "4", "--throughput-only", "--repeat", "1", "--data-dir",
                      str(make_data(tmp_path / "data")),
                      "--out", str(run_dir), "--mock-ttft-ms", "10", "--mock-itl-ms", "2", "--no-report", merged=True)
    assert proc.returncode == 0, proc.stdout
    (cell,) = read_cells(run_dir)
    assert cell.mode == "sync" and cell.status == "ok"
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("[1/1]")]
    assert " req/s, " in line and "E2E" not in line and "TTFT" not in line


@pytest.mark.slow
def test_a_trace_is_a_level_of_its_own_replayed_and_reported(tmp_path):
    lines = write_trace(tmp_path / "trace.jsonl", 12, seed=2)
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "a=mock,b=mock", "--baseline", "a", "--trace", str(tmp_path / "trace.jsonl"),
                      "--time-scale", "0.5", "--api", "completion", "--pool", "12", "--out", str(run_dir),
                      "--mock-ttft-ms", "20", "--mock-itl-ms", "2", merged=True)
    assert proc.returncode == 0, proc.stdout
    cells = sorted(read_cells(run_dir), key=lambda c: c.server)
    assert [(c.server, c.task, c.phase, c.status, c.prefix) for c in cells] == [
        (s, "synthetic", "trace", "ok", f"{s}/trace/synthetic_stream_c12") for s in ("a", "b")]
    assert "a synthetic stream trace pool=12: 12 req, 0 failed" in proc.stdout
    for cell in cells:
        assert_replayed(run_dir / f"{cell.prefix}_requests.jsonl", lines, 0.5)
    report = (run_dir / "report" / "summary.md").read_text().splitlines()
    first_table = report[:report.index(next(line for line in report if line.startswith("## ")))]
    assert any(line.startswith("| b ") and "| synthetic | stream | c12 " in line and "| trace " in line
               for line in first_table), report  # beside the matrix's rows, its phase shown
    assert any(line.startswith("| a / b ") and "| synthetic | stream | c12 trace " in line for line in report), report


def test_scipy_stats_is_imported_in_the_background_while_a_search_waits():
    """The search's tests need scipy.stats (about a second to import): the runner imports it beside the saturation
    run, not between it and the first step; the prefetch leaves it imported and the caller unblocked."""
    import subprocess
    import sys

    code = ("import sys, time, threading\n"
            "from llmload.core.sequential import prefetch_scipy_stats\n"
            "assert 'scipy.stats' not in sys.modules\n"
            "t = time.monotonic(); prefetch_scipy_stats(); returned = time.monotonic() - t\n"
            "[th.join(60) for th in threading.enumerate() if th.name == 'prefetch-scipy-stats']\n"
            "print(returned, 'scipy.stats' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    returned, imported = proc.stdout.split()
    assert imported == "True" and float(returned) < 0.1, proc.stdout
