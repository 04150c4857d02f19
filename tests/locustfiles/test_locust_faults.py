"""Faults in a real Locust run: each is a failure with a clear message in the raw log and Locust's stats,
and the run goes on to its end (the scripted server rotates through good answers and faults)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from locust_helpers import (FAULT_SERVER, locust_command, output, read_failures, read_stats, run_locust, serving,
                            write_prompts)
from llmload.core.metrics import failure_class
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.services import ServiceProcess, free_port, local_url
from llmload.targets.basic import basic_server_command

pytestmark = pytest.mark.integration

_spec = importlib.util.spec_from_file_location("loadgen_fault_server", FAULT_SERVER)
_fault_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fault_module)
CYCLE = _fault_module.CYCLE

EXPECTED = {
    "http500": "HTTP 500: internal server error: RuntimeError",
    "malformed": "malformed SSE data (not JSON): '{this is not json'",
    "nodone": "stream ended without [DONE]",
    "midstream": "error event in the stream: generation failed: RuntimeError: out of memory",
    "stall": "timed out after 1 s (--timeout)",
    "drop": "before the response ended (mid-stream)",
}


def test_every_fault_is_a_clear_failure_and_the_run_goes_on(fault_server, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "faults"
    rounds = 2
    proc = run_locust("chat.py", fault_server, "-u", "1", "-r", "1", "-t", "60s", "--csv", str(prefix),
                      "--requests", str(rounds * len(CYCLE)), "--model", "cycle", "--timeout", "1",
                      "--dataset", str(prompts))
    log = output(proc)
    assert proc.returncode == 1, log[-3000:]  # Locust's exit code when a run had failures
    assert "Traceback" not in log
    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == rounds * len(CYCLE)
    ok = [r for r in results if r.success]
    assert len(ok) == rounds and all(r.output_tokens == 3 for r in ok)  # the good answers between the faults
    errors = [r.error for r in results if not r.success]
    for name, message in EXPECTED.items():
        assert sum(message in e for e in errors) == rounds, (name, errors)
    assert all("\n" not in e for e in errors)
    # each fault in its class (llmload.core.metrics.failure_class), counted so in the summary
    classes = {"http500": "server_error", "malformed": "protocol", "nodone": "protocol", "midstream": "server_error",
               "stall": "timeout", "drop": "connection"}
    for name, kind in classes.items():
        assert {failure_class(r) for r in results if EXPECTED[name] in r.error} == {kind}, name
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]
    assert {k: summary[f"failed_{k}"] for k in set(classes.values())} == {
        "server_error": 2 * rounds, "protocol": 2 * rounds, "timeout": rounds, "connection": rounds}

    # the same messages, and only real requests, in Locust's own statistics
    stats = read_stats(prefix)
    total = stats[("", "Aggregated")]
    assert (int(total["Request Count"]), int(total["Failure Count"])) == (len(results), len(errors))
    failures = read_failures(prefix)
    assert sum(failures.values()) == len(errors)
    for message in EXPECTED.values():
        assert sum(n for text, n in failures.items() if message in text) == rounds, failures


def test_connection_refused_fails_each_request_and_the_run_ends(tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "refused_requests.jsonl"
    host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = run_locust("chat.py", host, "-u", "2", "-r", "2", "-t", "30s", "--requests", "4", "--raw-log", str(raw),
                      "--dataset", str(prompts))
    log = output(proc)
    assert proc.returncode == 1 and "Traceback" not in log, log[-3000:]
    results = read_results(raw)
    assert len(results) == 4 and not any(r.success for r in results)
    # without --model the first failure is the model lookup; the message says what happened and what to do
    assert all("connection refused by 127.0.0.1:" in r.error for r in results), [r.error for r in results]
    assert all("unreachable" in r.flags for r in results) and "pass --model" in results[0].error
    assert "connection refused by 127.0.0.1:" in log  # in Locust's error report too
    assert f"error: no server answered at {host} (connection refused): start it first" in log


@pytest.mark.slow
def test_no_server_backs_off_and_ends_the_run_with_one_line(tmp_path):
    """Without --requests or -t a dead server still ends the run, after NO_SERVER_S, and is not flooded."""
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "dead_requests.jsonl"
    host = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = run_locust("chat.py", host, "-u", "8", "-r", "8", "--raw-log", str(raw), "--dataset", str(prompts),
                      "--model", "m", timeout=60)
    took = time.monotonic() - started
    log = output(proc)
    assert proc.returncode == 1 and "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "error: no server answered" in line]
    assert len(lines) == 1 and f"at {host} (connection refused)" in lines[0]
    results = read_results(raw)
    # each user backs off 50 ms, 100 ms, ... up to 1 s between attempts: about a dozen each in 10 s, not thousands
    assert 8 <= len(results) <= 8 * 25 and took < 40, (len(results), took)
    assert all("unreachable" in r.flags and not r.success for r in results)


@pytest.mark.slow
def test_an_outage_mid_run_is_measured_and_the_run_goes_on(tmp_path):
    """The server stops for about 3 s and comes back on the same port: the summary says how long it was down."""
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "outage"
    port = free_port()
    command = basic_server_command("mock", port, extra=["--mock-ttft-ms", "20", "--mock-itl-ms", "5"])

    def start_server(name: str) -> ServiceProcess:
        server = ServiceProcess(name, command, local_url(port, "/health"), tmp_path / f"{name}.log").start()
        server.wait_ready(60)
        return server

    servers = [start_server("before")]
    locust = subprocess.Popen(locust_command("chat.py", local_url(port), "--headless", "--only-summary",
                                             "-u", "2", "-r", "2", "-t", "12s", "--csv", str(prefix),
                                             "--dataset", str(prompts), "--max-tokens", "4"),
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(3)
        servers[0].stop()
        time.sleep(3)
        servers.append(start_server("after"))
        log, _ = locust.communicate(timeout=60)
    finally:
        if locust.poll() is None:
            locust.kill()
        for server in servers:
            server.stop()
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert 2.0 <= summary["unreachable_s"] <= 6.0, summary["unreachable_s"]
    results = read_results(f"{prefix}_requests.jsonl")
    assert sum(r.success for r in results) > 20 and any("unreachable" in r.flags for r in results)
    assert "the server was unreachable for" in log and "Traceback" not in log


def test_a_usage_of_zero_beside_generated_text_is_flagged_and_counted_from_the_chunks(fault_server, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "zero_requests.jsonl"
    for mode in ("stream", "sync"):
        proc = run_locust("chat.py", fault_server, "-u", "1", "-r", "1", "--requests", "2", "--model", "zerousage",
                          "--mode", mode, "--raw-log", str(raw), "--dataset", str(prompts))
        assert proc.returncode == 0, output(proc)[-2000:]
        results = read_results(raw)
        assert len(results) == 2 and all(r.success and "usage_zero" in r.flags for r in results)
        if mode == "stream":
            assert all(r.output_tokens == 3 and r.output_tokens_source == "chunks" for r in results)
        else:  # no chunks to count: the count stays the server's, flagged, for the report to reconcile
            assert all(r.output_tokens == 0 and r.output_text == "".join(_fault_module.TOKENS) for r in results)


def lookups(url: str) -> int:
    with urllib.request.urlopen(f"{url}/lookups", timeout=5) as response:
        return json.load(response)["lookups"]


@contextlib.contextmanager
def fault_server_with(tmp_path, *args: str):
    """A fault server of this test's own, started with ``args``; yields its URL."""
    port = free_port()
    with serving("fault server", [sys.executable, str(FAULT_SERVER), "--port", str(port), *args], port,
                 tmp_path / "server.log"):
        yield f"http://127.0.0.1:{port}"


def test_the_model_is_looked_up_once_per_process_for_every_user(tmp_path):
    """16 users start together without --model: one /v1/models request, and every user uses its answer."""
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "once_requests.jsonl"
    with fault_server_with(tmp_path, "--models-delay", "1.5", "--models-id", "ok") as url:
        proc = run_locust("chat.py", url, "-u", "16", "-r", "16", "--requests", "32", "--raw-log", str(raw),
                          "--dataset", str(prompts))
        assert proc.returncode == 0, output(proc)[-3000:]
        assert lookups(url) == 1
    results = read_results(raw)
    assert len(results) == 32 and all(r.success for r in results)  # each sent the model "ok" it was told


def test_a_hanging_model_lookup_fails_fast_with_its_own_timeout(tmp_path):
    """/v1/models never answers in time: every user fails within --model-timeout, not after --timeout each."""
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "hang_requests.jsonl"
    with fault_server_with(tmp_path, "--models-delay", "60") as url:
        started = time.monotonic()
        proc = run_locust("chat.py", url, "-u", "32", "-r", "32", "--requests", "32", "--raw-log", str(raw),
                          "--model-timeout", "1", "--dataset", str(prompts), "--exit-code-on-error", "3")
        took = time.monotonic() - started
        asked = lookups(url)
    log = output(proc)
    assert proc.returncode == 3 and "Traceback" not in log, log[-3000:]  # Locust's --exit-code-on-error
    results = read_results(raw)
    assert len(results) == 32 and not any(r.success for r in results)
    assert all("/v1/models did not answer within 1 s (pass --model to skip the look-up)" in r.error
               for r in results), {r.error for r in results}
    assert asked <= 4 and took < 30, (asked, took)  # one look-up at a time, shared by every waiting user
