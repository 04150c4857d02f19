"""Faults in a real Locust run: each is a failure with a clear message in the raw log and Locust's stats,
and the run goes on to its end (the scripted server rotates through good answers and faults)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from locust_helpers import output, read_failures, read_stats, run_locust, serving, write_prompts
from llmload.core.rawlog import read_results
from llmload.core.services import free_port

FAULT_SERVER = Path(__file__).resolve().parents[1] / "llmload" / "core" / "fault_server.py"
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


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    port = free_port()
    folder = tmp_path_factory.mktemp("fault-server")
    with serving("fault server", [sys.executable, str(FAULT_SERVER), "--port", str(port)], port,
                 folder / "server.log"):
        yield f"http://127.0.0.1:{port}"


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
    assert "pass --model" in results[0].error
    assert "connection refused by 127.0.0.1:" in log  # in Locust's error report too
