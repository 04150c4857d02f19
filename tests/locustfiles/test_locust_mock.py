"""Proof against the mock engine (200 ms to the first token, 20 ms between tokens), real Locust runs.

For 1 and 32 users, sync and stream, both APIs: every request is in the raw log
exactly once, ``--requests`` stops at exactly N, Locust's CSV holds the true E2E
and the TTFT/TPOT rows without inflating the Aggregated count, and the measured
figures match the truth.

The truth is recorded by the server (``benchmarks/recording_mock.py``: the basic server's
app and mock engine, writing when each token left the engine and when each
answer's body was sent). Per request, truth TTFT = first token's emission - the
client's start, sync E2E = body sent - the client's start, and so on, derived
with :func:`llmload.core.metrics.request_metrics` like the measurement itself; the
difference is the load generator's own error (loopback delivery plus its
scheduling delay). Its median and its mean over the requests must stay within
10 ms: this 2-core machine runs the mock server and Locust side by side (and, on
a developer's machine, other jobs), and whenever the OS deschedules the Locust
process every line arriving meanwhile is stamped late. Measured (printed as
MEASURED): TTFT and TPOT errors under 1.5 ms on average, E2E errors 0.1-5 ms,
even with the machine's load average at 6.

With one user the server is idle between tokens, so the truth is also the
nominal schedule (TTFT 200 ms, TPOT 20 ms, E2E 200 + 20 * (N - 1) ms), checked
within 25 ms as a sanity check of the set-up (about 3 ms when quiet). With 32
users the mock server itself falls behind (about 1 ms of request handling
each, in a burst), which is what the recorded truth accounts for.
"""

from __future__ import annotations

import csv
import importlib.util
from statistics import mean, median

import pytest

from benchmarks.recording_mock import measurement_errors_ms, server_truth
from locust_helpers import ITL_MS, TTFT_MS, output, read_stats, run_locust, write_prompts
from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # TTFT/TPOT within a few ms of the truth

TOKENS = 10
MEDIAN_ERROR_MS = 10.0
MEAN_ERROR_MS = 10.0
NOMINAL_MS = 25.0


@pytest.mark.parametrize("users, requests", [(1, 5), (32, 48)], ids=["1user", "32users"])
@pytest.mark.parametrize("api", ["completion", "chat"])
@pytest.mark.parametrize("mode", ["sync", "stream"])
def test_measures_match_the_truth(recording_mock, tmp_path, mode, api, users, requests):
    url, server_pid, record = recording_mock
    record.write_text("")
    prompts = write_prompts(tmp_path / "chat.jsonl", "chat", count=requests)  # one prompt per request
    prefix = tmp_path / "run"
    args = ["-u", str(users), "-r", str(users), "-t", "60s", "--csv", str(prefix), "--requests", str(requests),
            "--max-tokens", str(TOKENS), "--ignore-eos", "--dataset", str(prompts)]
    env = {}
    if (mode, api) == ("sync", "completion"):
        env = {"LOCUST_LLM_MODE": mode, "LOCUST_LLM_API": api}  # the options also come from the environment
    else:
        args += ["--mode", mode, "--api", api]
    monitored = (mode, api, users) == ("stream", "chat", 1)
    if monitored:
        args += ["--monitor-pid", str(server_pid), "--monitor-interval", "0.2"]
    html = tmp_path / "report.html" if (mode, api, users) == ("stream", "chat", 32) else None
    if html:
        args += ["--html", str(html)]
    proc = run_locust("chat.py", url, *args, env=env)
    log = output(proc)
    assert proc.returncode == 0, log[-3000:]
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]

    # every request exactly once in the raw log, and exactly --requests of them
    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == requests
    assert len({r.request_id for r in results}) == requests
    assert sorted(r.prompt_id for r in results) == sorted(f"chat-{i}" for i in range(requests))
    assert all(r.success for r in results), [r.error for r in results if not r.success][:3]
    assert {(r.mode, r.api, r.task) for r in results} == {(mode, api, "chat")}
    assert all(r.output_tokens == TOKENS and r.output_tokens_source == "usage" for r in results)

    # Locust's CSV: the true E2E in the request row, METRIC rows apart from the Aggregated total
    stats = read_stats(prefix)
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    row = stats[("POST", f"chat {path}")]
    total = stats[("", "Aggregated")]
    assert int(row["Request Count"]) == int(total["Request Count"]) == requests
    assert int(total["Failure Count"]) == 0
    assert float(row["Average Content Size"]) == TOKENS  # response_length = output tokens
    s = summarize(results)
    assert float(row["Average Response Time"]) == pytest.approx(s.get("e2e", "mean") * 1000, abs=0.01)
    metric_rows = {name for kind, name in stats if kind == "METRIC"}
    if mode == "stream":
        assert metric_rows == {"chat TTFT", "chat TPOT"}
        for name, value in (("chat TTFT", s.get("ttft", "mean")), ("chat TPOT", s.get("tpot", "mean"))):
            assert int(stats[("METRIC", name)]["Request Count"]) == requests
            assert float(stats[("METRIC", name)]["Average Response Time"]) == pytest.approx(value * 1000, abs=0.01)
    else:
        assert metric_rows == set() and s.get("ttft", "mean") is None
    if html:  # Locust's HTML report lists the METRIC rows too
        report_html = html.read_text()
        assert '"chat TTFT"' in report_html and '"chat TPOT"' in report_html

    # the figures against the server's truth, request by request
    truth = server_truth(record, results)
    assert None not in truth, "a request has no recorded generation"
    fields = ("e2e", "ttft", "tpot") if mode == "stream" else ("e2e",)
    errors = {field: measurement_errors_ms(results, truth, field) for field in fields}
    print(f"\nMEASURED {mode} {api} users={users}: E2E mean {s.get('e2e', 'mean') * 1000:.1f} ms"
          + (f", TTFT mean {s.get('ttft', 'mean') * 1000:.1f} ms, TPOT mean {s.get('tpot', 'mean') * 1000:.2f} ms"
             if mode == "stream" else "") + "; error vs server truth: "
          + "; ".join(f"{field} median {median(e):+.2f} ms, mean {mean(e):+.2f} ms, max {max(e):+.2f} ms"
                      for field, e in errors.items()))
    for field, errs in errors.items():
        assert abs(median(errs)) <= MEDIAN_ERROR_MS and abs(mean(errs)) <= MEAN_ERROR_MS, (field, errs)
    if users == 1:  # an idle server keeps to the nominal schedule
        assert abs(s.get("e2e", "mean") * 1000 - (TTFT_MS + ITL_MS * (TOKENS - 1))) <= NOMINAL_MS
        if mode == "stream":
            assert abs(s.get("ttft", "mean") * 1000 - TTFT_MS) <= NOMINAL_MS
            assert abs(s.get("tpot", "mean") * 1000 - ITL_MS) <= 2.0

    if monitored:
        if importlib.util.find_spec("monitors.sampler") is None:
            assert "resource monitor is not available" in log
        else:
            with open(f"{prefix}_monitor.csv", newline="") as handle:
                rows = list(csv.DictReader(handle))
            assert rows and float(rows[-1]["server_rss_mib"]) > 0
