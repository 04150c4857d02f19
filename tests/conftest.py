"""Shared fixtures: real server processes on free ports, stopped after use; the test tiers (:mod:`tiers`).

``server_factory(engine, *flags)`` starts ``python -m server`` and returns its
base URL; ``real_server`` is one session-wide naive server on the embedded
default model; ``default_model`` is that model's materialised folder.
"""

from __future__ import annotations

import pytest

from llmload.core.services import ServiceProcess, free_port
from llmload.targets.basic import basic_server_command
from tiers import check_tiers, guarded_phase, tier_of

#: Folders whose tests share expensive session fixtures (the real-model server; the runs the report tests read):
#: under pytest-xdist each goes to one worker whole, so that those fixtures start once. Other tests go by file.
SHARED_DIRS = ("tests/server/", "tests/reports/")


def scope_of(nodeid: str) -> str:
    """What one xdist worker takes whole: a shared folder, else a file."""
    path = nodeid.split("::", 1)[0]
    return next((folder for folder in SHARED_DIRS if path.startswith(folder)), path)


def pytest_collection_modifyitems(items):
    """Check the tiers; order, longest first so that the workers end together: e2e first (vLLM's start-up overlaps
    the rest), then the shared folders, then the other scopes that start processes, then the unit-only ones (short:
    they fill the workers' last minutes)."""
    check_tiers(items)
    heavy = {scope_of(item.nodeid) for item in items if tier_of(item) != "unit"}
    items.sort(key=lambda item: (tier_of(item) != "e2e", not item.nodeid.startswith(SHARED_DIRS),
                                 scope_of(item.nodeid) not in heavy))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler by scope (:func:`scope_of`), the scopes in collection order."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFolderScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False
    return SharedFolderScheduling(config, log)


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
