"""Starting server processes: a signal that arrives while a process is being spawned is handled once it is recorded."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from llmload.core import services
from llmload.core.services import ServiceProcess, signals_after


class Stop(Exception):
    """What the test's signal handler raises (the runner's raises Interrupted)."""


@pytest.fixture
def raising_handler():
    """SIGUSR1 and SIGTERM raise :class:`Stop` in this process while the test runs."""

    def stop(signum, _frame):
        raise Stop(signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


@pytest.mark.unit
def test_signals_in_the_block_reach_their_handler_after_it(raising_handler):
    reached = []
    with pytest.raises(Stop):
        with signals_after((signal.SIGUSR1,)):
            signal.raise_signal(signal.SIGUSR1)
            reached.append("the block's end")  # not cut short by the handler
    assert reached == ["the block's end"]
    with pytest.raises(Stop):  # the handler is back
        signal.raise_signal(signal.SIGUSR1)


@pytest.mark.unit
def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    try:
        with signals_after((signal.SIGUSR1,)):
            signal.raise_signal(signal.SIGUSR1)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.integration
def test_a_stop_signal_during_the_spawn_leaves_the_process_recorded(tmp_path, monkeypatch, raising_handler):
    """SIGTERM while Popen has not returned yet: start raises after ``process`` is set, so the caller can stop it
    (before, the handler raised inside Popen and the server ran on, unknown to the runner)."""
    real_popen = subprocess.Popen

    def popen_then_signal(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs handlers between bytecodes: before Popen returns
        return proc

    monkeypatch.setattr(services.subprocess, "Popen", popen_then_signal)
    service = ServiceProcess("sleeper", ["sleep", "60"], "http://127.0.0.1:9/", tmp_path / "sleeper.log")
    with pytest.raises(Stop):
        service.start()
    try:
        assert service.process is not None and service.process.poll() is None
    finally:
        service.stop(grace=5)
    assert service.process.poll() is not None
