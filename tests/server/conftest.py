"""Fixtures of the basic-server tests: one mock server with known timings, one batched server on the embedded
model, and the real tokenizer.

``real_server`` (one naive server on the embedded model) comes from the
top-level conftest and is shared with the other test folders.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from llmload.core.services import ServiceProcess, free_port
from llmload.targets.basic import basic_server_command
from server_client import MOCK_ITL_MS, MOCK_MAX_MODEL_LEN, MOCK_TTFT_MS, SLOTTED_MOCK


def serve(tmp_path_factory, name: str, engine: str, *flags: str, model: str | None = None,
          timeout: float = 60) -> Iterator[str]:
    """Run a server with ``flags`` for a fixture: yields its base URL, stops it after."""
    port = free_port()
    command = basic_server_command(engine, port, model=model, extra=[*flags, "--log-level", "warning"])
    proc = ServiceProcess(name, command, f"http://127.0.0.1:{port}/health",
                          tmp_path_factory.mktemp(name.replace(" ", "-")) / "server.log")
    proc.start()
    proc.wait_ready(timeout)
    yield f"http://127.0.0.1:{port}"
    proc.stop()


def serve_mock(tmp_path_factory, name: str, *flags: str) -> Iterator[str]:
    """Run a mock-engine server with ``flags`` for a fixture: yields its base URL, stops it after."""
    yield from serve(tmp_path_factory, name, "mock", *flags)


@pytest.fixture(scope="session")
def mock_url(tmp_path_factory) -> Iterator[str]:
    """Base URL of a mock-engine server (TTFT 100 ms, ITL 10 ms, context 64 tokens) for the session."""
    yield from serve_mock(tmp_path_factory, "mock server", "--mock-ttft-ms", str(MOCK_TTFT_MS), "--mock-itl-ms",
                          str(MOCK_ITL_MS), "--max-model-len", str(MOCK_MAX_MODEL_LEN))


@pytest.fixture(scope="module")
def reasoning_mock(tmp_path_factory) -> Iterator[str]:
    """A mock whose answers start with 3 reasoning tokens under ``reasoning_content``, 2 tokens per chunk."""
    yield from serve_mock(tmp_path_factory, "reasoning mock", "--mock-ttft-ms", "50", "--mock-itl-ms", "10",
                          "--mock-reasoning-tokens", "3", "--mock-reasoning-field", "reasoning_content",
                          "--mock-tokens-per-chunk", "2")


@pytest.fixture(scope="module")
def slotted_mock(tmp_path_factory) -> Iterator[str]:
    """A mock of known capacity: ``SLOTTED_MOCK`` (2 slots, TTFT 60 ms, ITL 10 ms)."""
    slots, ttft_ms, itl_ms = SLOTTED_MOCK
    yield from serve_mock(tmp_path_factory, "slotted mock", "--mock-slots", str(slots), "--mock-ttft-ms", str(ttft_ms),
                          "--mock-itl-ms", str(itl_ms))


@pytest.fixture(scope="session")
def hf_tokenizer(default_model):
    """The embedded model's own tokenizer, to count tokens independently of the server."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model)


@pytest.fixture(scope="session")
def batched_url(default_model, tmp_path_factory) -> Iterator[str]:
    """One ``--engine batched --max-num-seqs 4`` server on the embedded model (one torch thread) for the session."""
    yield from serve(tmp_path_factory, "batched server", "batched", "--max-model-len", "2048", "--max-num-seqs", "4",
                     "--threads", "1", model=default_model, timeout=300)
