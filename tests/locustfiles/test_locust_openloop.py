"""Open loop, warm-up, SLOs and load shapes in real Locust runs against the mock engine (known delays).

Accuracy bars: at constant arrivals the intended starts are exactly 1/R apart
and the achieved rate is within 2 % of R; Poisson gaps have a coefficient of
variation of 1 within sampling error; at 50 req/s the dispatch lag's p50 stays
under 2 ms and its p90 under 5 ms (its p99 too on a quiet machine: the bar on
the p99 leaves room for a shared 2-core VM's scheduling hiccups, and still
sits far below the seconds of a generator that falls behind); one user at a
rate it cannot sustain shows the lag, not hides it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from locust_helpers import output, read_failures, read_stats, run_locust, write_prompts
from llmload.core.metrics import request_metrics, summarize
from llmload.core.rawlog import read_results

pytestmark = pytest.mark.integration

TOKENS = 8  # on the fast mock (TTFT 50 ms, 5 ms per token): 85 ms per request


def open_loop(url, tmp_path, name, *args, users=16, timeout=90):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / name
    proc = run_locust("chat.py", url, "-u", str(users), "-r", str(users), "-t", "60s", "--csv", str(prefix),
                      "--max-tokens", str(TOKENS), "--ignore-eos", "--dataset", str(prompts), "--model", "mock",
                      *args, timeout=timeout)
    assert "Traceback" not in output(proc), output(proc)[-3000:]
    return proc, prefix, read_results(f"{prefix}_requests.jsonl")


@pytest.mark.serial  # dispatch lag and gaps within a few ms
@pytest.mark.slow
def test_constant_arrivals_keep_their_schedule_and_rate(fast_mock, tmp_path):
    rate, count = 50.0, 300
    proc, prefix, results = open_loop(fast_mock, tmp_path, "constant", "--rate", str(rate), "--arrival", "constant",
                                      "--requests", str(count))
    assert proc.returncode == 0 and len(results) == count and all(r.success for r in results)
    intended = np.sort([r.intended_start for r in results])
    assert np.allclose(np.diff(intended), 1 / rate, atol=1e-5)
    sent = np.sort([r.start_time for r in results])
    achieved = (count - 1) / (sent[-1] - sent[0])
    assert abs(achieved / rate - 1) < 0.02, achieved
    lags = np.array([request_metrics(r).dispatch_lag for r in results]) * 1000
    print(f"\nMEASURED constant {rate:g} req/s: achieved {achieved:.2f}, lag p50 {np.percentile(lags, 50):.2f} ms, "
          f"p99 {np.percentile(lags, 99):.2f} ms, max {lags.max():.2f} ms")
    p50, p90, p99 = np.percentile(lags, [50, 90, 99])
    assert p50 < 2.0 and p90 < 5.0 and p99 < 50.0 and lags.min() > -0.5
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert summary["settings"]["arrival"] == "constant"
    assert ("METRIC", "chat dispatch lag") in read_stats(prefix)


@pytest.mark.serial  # dispatch lag and gaps within a few ms
@pytest.mark.slow
def test_poisson_arrivals_have_the_spread_of_a_poisson_process(fast_mock, tmp_path):
    # 80 req/s of 85 ms requests: about 7 in flight, 32 users for the bursts; 400 gaps in 5 s
    proc, _, results = open_loop(fast_mock, tmp_path, "poisson", "--rate", "80", "--requests", "400", "--seed", "3",
                                 users=32)
    gaps = np.diff(np.sort([r.intended_start for r in results]))
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1) < 0.2 and abs(1 / gaps.mean() / 80 - 1) < 0.15, (cv, 1 / gaps.mean())
    sent_gaps = np.diff(np.sort([r.start_time for r in results]))
    assert abs(sent_gaps.std() / sent_gaps.mean() - cv) < 0.1  # what went out kept the schedule's spread


@pytest.mark.slow
def test_one_user_at_a_rate_it_cannot_hold_shows_the_lag(fast_mock, tmp_path):
    # one request takes ~85 ms: one user holds ~12 req/s, not 40
    proc, prefix, results = open_loop(fast_mock, tmp_path, "behind", "--rate", "40", "--arrival", "constant",
                                      "--requests", "60", users=1)
    log = output(proc)
    warnings = [line for line in log.splitlines() if "fell behind its schedule" in line]
    assert len(warnings) == 1 and "raise -u" in warnings[0], log[-2000:]
    s = summarize(results)
    assert s.get("dispatch_lag", "p99") > 2.0  # seconds: the queue behind one user grows all run long
    assert s.get("e2e_sched", "p50") > 10 * s.get("e2e", "p50")  # latency from the schedule tells the truth
    assert json.loads(Path(f"{prefix}_summary.json").read_text())["late_requests"] > 30


def test_warmup_requests_are_sent_logged_and_left_out_of_every_statistic(fast_mock, tmp_path):
    proc, prefix, results = open_loop(fast_mock, tmp_path, "warm", "--requests", "25", "--warmup", "5", users=2)
    assert proc.returncode == 0 and len(results) == 25
    warm = [r for r in results if r.warmup]
    assert len(warm) == 5 and max(r.start_time for r in warm) <= min(r.start_time for r in results
                                                                         if not r.warmup) + 0.5
    stats = read_stats(prefix)
    assert int(stats[("", "Aggregated")]["Request Count"]) == 20
    assert json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]["requests"] == 20


def test_slo_attainment_and_goodput_in_the_log_the_stats_and_the_summary(fast_mock, tmp_path):
    # TTFT is 50 ms: ttft<=30 is missed by every request, ttft<=500 met by every one
    for slo, met in (("ttft=30", False), ("ttft=500,e2e=2s", True)):
        proc, prefix, results = open_loop(fast_mock, tmp_path, f"slo{met}", "--requests", "20", "--slo", slo,
                                          users=4)
        assert all(r.slo_ok is met for r in results), [r.slo_ok for r in results]
        rows = {name: row for (kind, name), row in read_stats(prefix).items() if kind == "METRIC"}
        slo_row = next(row for name, row in rows.items() if name.startswith("chat SLO"))
        assert int(slo_row["Failure Count"]) == (0 if met else 20)
        summary = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]
        assert summary["slo_attainment"] == (100.0 if met else 0.0)
        assert (summary["goodput"] > 0) is met
        assert proc.returncode == (0 if met else 1)  # missed targets are failures: Locust's exit code says so
        failures = read_failures(prefix)
        assert failures == ({} if met else {"missed the SLO": 20}), failures
        total = read_stats(prefix)[("", "Aggregated")]
        assert (int(total["Request Count"]), int(total["Failure Count"])) == (20, 0)  # real requests only


@pytest.mark.parametrize("shape, users, seconds", [(("--stages", "3s:2,3s:5"), {2, 5}, 6.0),
                                                    (("--ramp", "1:3:10s"), {1, 3}, 10.0)])
@pytest.mark.slow
def test_load_shapes_step_the_users_and_end_the_run(fast_mock, tmp_path, shape, users, seconds):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "shape"
    proc = run_locust("chat.py", fast_mock, *shape, "-r", "10", "--csv", str(prefix),
                      "--max-tokens", str(TOKENS), "--dataset", str(prompts), "--model", "mock", timeout=60)
    assert proc.returncode == 0 and "Traceback" not in output(proc), output(proc)[-3000:]
    with open(f"{prefix}_stats_history.csv", newline="") as handle:
        seen = {int(row["User Count"]) for row in csv.DictReader(handle)}
    assert users <= seen and max(seen) == max(users), seen
    results = read_results(f"{prefix}_requests.jsonl")
    span = max(r.start_time for r in results) - min(r.start_time for r in results)
    assert seconds - 2.0 < span < seconds + 2.0  # the run stopped after the last stage
