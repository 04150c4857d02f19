"""Starting, waiting for and stopping server processes (the basic server, vLLM, mock servers).

Used by the runner and by the tests: a :class:`ServiceProcess` starts a command
in its own process group with its output in a log file, waits until an HTTP
health URL answers (bounded, reported timeout; the log's tail on failure) and
stops the whole process tree cleanly.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence


#: Seconds between the health checks of a service in its first :data:`FIRST_POLLS_FOR_S` seconds (then
#: ``wait_ready``'s interval): the mock and the basic server are up in 1-3 s on the 2-core machine.
FIRST_POLL_S = 0.1
FIRST_POLLS_FOR_S = 10.0


class ServiceError(RuntimeError):
    """A service failed to start or died; the message ends with its log's tail."""


def free_port() -> int:
    """An unused TCP port on localhost."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def local_url(port: int, path: str = "") -> str:
    """``http://127.0.0.1:<port><path>``: the one place a local server's URL is spelled."""
    return f"http://127.0.0.1:{port}{path}"


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already listens on ``host:port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str, timeout: float = 2.0, headers: dict | None = None) -> bool:
    """True when ``url`` answers 2xx."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextmanager
def signals_after(signums: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold ``signums`` while the block runs and deliver them to their handlers once it has ended (main thread only;
    elsewhere Python runs no handler): a handler that raises cannot then leave a process started but not recorded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, object]] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: held.append((signum, frame)))
                for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum, frame in held:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


class ServiceProcess:
    """A server started as a subprocess, with a health URL to wait on."""

    def __init__(self, name: str, command: Sequence[str], health_url: str, log_path: Path,
                 env: dict | None = None, cwd: str | os.PathLike | None = None):
        self.name = name
        self.command = list(command)
        self.health_url = health_url
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.process: subprocess.Popen | None = None
        self.started_at: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> "ServiceProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self.env or {})}
        # a signal's handler (the runner's stop, Ctrl-C) runs once the process is recorded, so that it can be stopped
        with self.log_path.open("ab") as log, signals_after():
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            cwd=self.cwd, start_new_session=True)
            self.started_at = time.monotonic()
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float, interval: float = 0.5, progress: bool = False) -> float:
        """Wait until the health URL answers; return seconds taken, or raise :class:`ServiceError`.

        The health URL is polled every :data:`FIRST_POLL_S` for the first :data:`FIRST_POLLS_FOR_S` seconds (a
        server that is up in a second is seen within a tenth of it), then every ``interval``.
        """
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + timeout
        next_report = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServiceError(f"{self.name} exited with code {self.process.returncode} before it was ready "
                                   f"(log: {self.log_path}):\n{tail(self.log_path)}")
            if http_ok(self.health_url):
                return time.monotonic() - (self.started_at or 0)
            if progress and time.monotonic() >= next_report:
                waited = time.monotonic() - (self.started_at or 0)
                print(f"   ... waiting for {self.name} ({waited:.0f}s of at most {timeout:.0f}s)",
                      file=sys.stderr, flush=True)
                next_report += 15
            early = time.monotonic() - (self.started_at or 0) < FIRST_POLLS_FOR_S
            time.sleep(min(FIRST_POLL_S, interval) if early else interval)
        self.stop()
        raise ServiceError(f"{self.name} was not ready after {timeout:.0f}s (log: {self.log_path}):\n"
                           f"{tail(self.log_path)}")

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after ``grace`` seconds."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # children (vLLM's engine core) may outlive the leader
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> "ServiceProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
