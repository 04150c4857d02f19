"""--cancel-rate in a real Locust run on the mock server: the drawn requests are abandoned mid-stream, flagged in the
raw log, counted in their own column and Locust row (not failures), and the server's running count, sampled by the
monitor, never exceeds the users (abandoned generations do not linger)."""

from __future__ import annotations

import csv
import json

import pytest

from llmload.core.cancel import CancelPolicy, parse_cancel_after
from llmload.core.rawlog import read_results
from locust_helpers import output, read_stats, run_locust, write_prompts

pytestmark = pytest.mark.integration

USERS, REQUESTS, TOKENS, SEED = 4, 24, 30, 3  # 200 ms + 29 x 20 ms per request unless cancelled


def test_cancelled_requests_are_flagged_and_counted_apart(mock_server, tmp_path):
    url, pid = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "cancel"
    proc = run_locust("chat.py", url, "-u", str(USERS), "-r", str(USERS), "--requests", str(REQUESTS),
                      "--max-tokens", str(TOKENS), "--ignore-eos", "--dataset", str(prompts), "--model", "mock",
                      "--csv", str(prefix), "--cancel-rate", "0.5", "--cancel-after", "ttft+100ms", "--seed",
                      str(SEED), "--monitor-pid", str(pid), "--metrics-url", f"{url}/metrics",
                      "--monitor-interval", "0.1", timeout=90)
    log = output(proc)
    assert proc.returncode == 0, log[-3000:]
    policy = CancelPolicy(0.5, parse_cancel_after("ttft+100ms"), SEED)
    expected = sum(policy.point(i) is not None for i in range(REQUESTS))  # the seed's draw, by request index
    assert 0 < expected < REQUESTS

    results = read_results(f"{prefix}_requests.jsonl")
    cancelled = [r for r in results if r.cancelled]
    assert len(results) == REQUESTS and len(cancelled) == expected
    assert all(r.cancel_after == "ttft+0.1s" and not r.success and r.error == "" for r in cancelled)
    assert all(0 < r.output_tokens < TOKENS and r.end_offset < 0.2 + 0.1 + 0.15 for r in cancelled)
    assert all(r.success and r.output_tokens == TOKENS and r.cancel_after == "" for r in results if not r.cancelled)

    summary = json.loads((tmp_path / "cancel_summary.json").read_text())
    assert (summary["summary"]["cancelled"], summary["summary"]["failures"]) == (expected, 0)
    assert summary["summary"]["cancelled_pct"] == pytest.approx(100 * expected / REQUESTS)
    assert summary["settings"]["cancel_rate"] == 0.5 and f"{expected} cancelled" in summary["line"]
    assert summary["summary"]["e2e_p50"] > 0.7  # the answered requests' E2E only (the cancelled are ~0.3 s)

    stats = read_stats(prefix)
    assert int(stats[("METRIC", "chat cancelled")]["Request Count"]) == expected
    assert int(stats[("POST", "chat /v1/chat/completions")]["Request Count"]) == REQUESTS - expected
    assert int(stats[("", "Aggregated")]["Failure Count"]) == 0

    with open(f"{prefix}_monitor.csv", newline="") as handle:
        running = [float(row["server_running"]) for row in csv.DictReader(handle) if row["server_running"]]
    assert running and max(running) <= USERS, running  # a cancelled request's generation ended with it
