"""Run folders shared by the report tests (made once per session by the real runner against mock servers)."""

from __future__ import annotations

import pytest

from prompt_sets import make_data
from report_helpers import run_runner, start_mock


@pytest.fixture(scope="session")
def prompt_dir(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("prompts"), ("qa",), n=8)


@pytest.fixture(scope="session")
def pair_run(tmp_path_factory, prompt_dir16):
    """Two servers: ``mock`` (TTFT 50 ms, started by the runner) and ``vllm``, a mock of ours with TTFT 100 ms.

    qa, sync and stream, 1 and 4 users, 16 requests (16 prompts) of 8 tokens per cell; no report (the tests merge).
    """
    folder = tmp_path_factory.mktemp("pair")
    url, server = start_mock(folder, ttft_ms=100)
    try:
        run_runner("--servers", f"mock,vllm={url}", "--tasks", "qa", "--modes", "sync,stream", "--parallel", "1,4",
                   "--requests", "16", "--max-tokens", "8", "--mock-ttft-ms", "50", "--data-dir", str(prompt_dir16),
                   "--out", str(folder / "run"), "--no-report", "--repeat", "1")
    finally:
        server.stop()
    return folder / "run"


@pytest.fixture(scope="session")
def prompt_dir16(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("prompts16"), ("qa",), n=16)


@pytest.fixture(scope="session")
def mock_runs(tmp_path_factory, prompt_dir16):
    """Three real runs of the runner's mock, qa stream at 1 and 4 users, 16 requests (16 prompts) of 8 tokens:
    ``a`` and ``same`` with TTFT 50 ms, ``slow`` with TTFT 100 ms."""
    folder = tmp_path_factory.mktemp("mock-runs")
    runs = {}
    for name, ttft in (("a", 50), ("same", 50), ("slow", 100)):
        run_runner("--servers", "mock", "--tasks", "qa", "--modes", "stream", "--parallel", "1,4", "--requests",
                   "16", "--max-tokens", "8", "--mock-ttft-ms", str(ttft), "--data-dir", str(prompt_dir16),
                   "--out", str(folder / name), "--no-report", "--repeat", "1")
        runs[name] = folder / name
    return runs


@pytest.fixture(autouse=True, scope="session")
def no_calibration():
    """Reports in these tests use no calibration unless a test names one (a developer's results/calibration.json
    would widen their intervals)."""
    import os

    before = os.environ.get("LLMLOAD_CALIBRATION")
    os.environ["LLMLOAD_CALIBRATION"] = "none"
    yield
    if before is None:
        os.environ.pop("LLMLOAD_CALIBRATION", None)
    else:
        os.environ["LLMLOAD_CALIBRATION"] = before
