"""Shared fixtures: real server processes on free ports, stopped after use; the test tiers (:mod:`tiers`).

``server_factory(engine, *flags)`` starts ``python -m server`` and returns its
base URL; ``real_server`` is one session-wide naive server on the embedded
default model; ``default_model`` is that model's materialised folder.
"""

from __future__ import annotations

import pytest

from llmload.core.services import ServiceProcess, free_port
from llmload.targets.basic import basic_server_command
from tiers import check_tiers, guarded_phase


def pytest_collection_modifyitems(items):
    check_tiers(items)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    return (yield from guarded_phase(item))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    return (yield from guarded_phase(item))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item):
    return (yield from guarded_phase(item))


@pytest.fixture(scope="session")
def default_model() -> str:
    from llmload.core.model_store import materialise_default_model

    return str(materialise_default_model())


def _start(tmp_dir, engine: str, flags, timeout: float) -> tuple[str, ServiceProcess]:
    port = free_port()
    proc = ServiceProcess(f"{engine} server", basic_server_command(engine, port, extra=list(flags)),
                          f"http://127.0.0.1:{port}/health", tmp_dir / f"server-{engine}-{port}.log")
    proc.start()
    proc.wait_ready(timeout)
    return f"http://127.0.0.1:{port}", proc


@pytest.fixture
def server_factory(tmp_path):
    """Start servers for one test: ``url = server_factory("mock", "--mock-ttft-ms", "50")``."""
    started: list[ServiceProcess] = []

    def start(engine: str = "mock", *flags: str, timeout: float = 120.0) -> str:
        url, proc = _start(tmp_path, engine, flags, timeout)
        started.append(proc)
        return url

    start.processes = started
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def real_server(default_model, tmp_path_factory) -> str:
    """One naive-engine server on the embedded model for the whole session (its base URL), one torch thread."""
    url, proc = _start(tmp_path_factory.mktemp("real-server"), "naive",
                       ["--model", default_model, "--max-model-len", "2048", "--threads", "1"], timeout=300)
    yield url
    proc.stop()
