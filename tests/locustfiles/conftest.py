"""Fixtures of the Locust suite's tests: mock servers on free ports (helpers live in locust_helpers)."""

from __future__ import annotations

import sys

import pytest

from benchmarks.recording_mock import start_recording_mock
from llmload.core.services import free_port
from llmload.targets.basic import basic_server_command
from locust_helpers import FAULT_SERVER, ITL_MS, TTFT_MS, serving


@pytest.fixture(scope="module")
def recording_mock(tmp_path_factory):
    """The mock engine recording each token's emission time (the ground truth): (base URL, pid, record path)."""
    folder = tmp_path_factory.mktemp("recording-mock")
    server = start_recording_mock(folder / "tokens.jsonl", TTFT_MS, ITL_MS, folder / "server.log")
    try:
        yield server.base_url, server.pid, folder / "tokens.jsonl"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mock_server(tmp_path_factory):
    """A mock-engine server with 200 ms to the first token and 20 ms between tokens: (base URL, pid)."""
    port = free_port()
    cmd = basic_server_command("mock", port, extra=["--mock-ttft-ms", str(TTFT_MS), "--mock-itl-ms", str(ITL_MS),
                                                    "--log-level", "warning"])
    with serving("mock server", cmd, port, tmp_path_factory.mktemp("mock") / "server.log") as proc:
        yield f"http://127.0.0.1:{port}", proc.pid


@pytest.fixture(scope="module")
def fast_mock(tmp_path_factory):
    """A mock-engine server with 50 ms to the first token and 5 ms between tokens: its base URL."""
    port = free_port()
    cmd = basic_server_command("mock", port, extra=["--mock-ttft-ms", "50", "--mock-itl-ms", "5",
                                                    "--log-level", "warning"])
    with serving("fast mock server", cmd, port, tmp_path_factory.mktemp("fast-mock") / "server.log"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def fault_server(tmp_path_factory):
    """The scripted fault server (:data:`FAULT_SERVER`; the request's model picks its answer): its base URL."""
    port = free_port()
    with serving("fault server", [sys.executable, str(FAULT_SERVER), "--port", str(port)], port,
                 tmp_path_factory.mktemp("fault-server") / "server.log"):
        yield f"http://127.0.0.1:{port}"
