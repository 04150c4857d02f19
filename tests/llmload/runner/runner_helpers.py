"""Helpers of the runner tests: prompt sets, running the runner, fake server kinds.

Run as a script, it is the runner (or, with ``tune`` first, ``llmload tune``) with the fake kinds registered:

    python tests/llmload/runner/runner_helpers.py --servers renamed-mock ...
    python tests/llmload/runner/runner_helpers.py tune --servers mock,exits-at-start ...
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from llmload.runner.cli import main as runner_main
from llmload.targets import TargetKind, TargetSettings, register
from llmload.targets.basic import basic_server_command

REPO = Path(__file__).resolve().parents[3]
HELPER = Path(__file__).resolve()


class RenamedMock(TargetKind):
    """The mock engine's command under a kind name of its own (a server kind the suite does not ship)."""

    name = "renamed-mock"
    description = "the mock engine, registered by a test"
    needs_model = False

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        return basic_server_command("mock", port, extra=["--log-level", "warning", "--mock-ttft-ms",
                                                         f"{settings.mock_ttft_ms:g}", "--mock-itl-ms",
                                                         f"{settings.mock_itl_ms:g}"])


class NeverReady(TargetKind):
    """A server that starts but never answers its health check (to interrupt a start-up)."""

    name = "never-ready"
    description = "a process that never becomes healthy"
    needs_model = False

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(600)"]


class ExitsAtStart(TargetKind):
    """A server that cannot start: it exits at once, saying why (a configuration that fails to start)."""

    name = "exits-at-start"
    description = "a process that exits before it is ready"
    needs_model = False

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        return [sys.executable, "-c", "import sys; sys.exit('cannot start: an impossible setting')"]


def register_fakes() -> None:
    register(RenamedMock())
    register(NeverReady())
    register(ExitsAtStart())


def error_line(program, argv: list[str], capsys) -> str:
    """The one ``error:`` line that ``program(argv)`` (a parser or a ``main``) ends with: exit code 2, no
    traceback."""
    import pytest  # the helpers are also a script: pytest only where a test asks

    with pytest.raises(SystemExit) as exit_info:
        program(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def runner_command(fakes: bool) -> list[str]:
    """The runner's command line: with ``fakes``, this helper module's (the fake targets registered first)."""
    return [sys.executable, str(HELPER)] if fakes else [sys.executable, "-m", "llmload.runner"]


def run_runner(*args: str, timeout: float = 600, merged: bool = False, fakes: bool = False,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the runner; ``merged``: stderr into stdout, as a terminal shows them (``proc.stderr`` is then "");
    ``env``: variables added to this process's environment (the servers it starts inherit them)."""
    proc = subprocess.run([*runner_command(fakes), *args], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)
    proc.stderr = proc.stderr or ""
    return proc


def start_runner(*args: str, fakes: bool = False) -> subprocess.Popen:
    """The runner in a session of its own (its PID is its process group), output to pipes."""
    return subprocess.Popen([*runner_command(fakes), *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def stop_leftovers(processes: list[psutil.Process]) -> list[str]:
    """Kill (by PID) those of ``processes`` still alive; return each one's PID and command line (an empty list when
    all had ended)."""
    alive = []
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"{proc.pid}: {' '.join(proc.cmdline())[:300]}")
                proc.kill()
        except psutil.NoSuchProcess:
            pass
    return alive


def wait_for(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def cell_records(run_dir: Path) -> list[dict]:
    path = run_dir / "cells.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def line_count(path: Path) -> int:
    return path.read_text().count("\n") if path.is_file() else 0


def read_summary(run_dir: Path) -> list[dict]:
    with (run_dir / "report" / "summary.csv").open() as handle:
        return list(csv.DictReader(handle))


def locust_count(stats_csv: Path) -> int | None:
    """The Aggregated request count of Locust's own stats CSV."""
    with stats_csv.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("Name") == "Aggregated":
                return int(float(row["Request Count"]))
    return None


def send(pid: int, signum: int, group: bool) -> None:
    if group:
        os.killpg(pid, signum)
    else:
        os.kill(pid, signum)


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


if __name__ == "__main__":
    register_fakes()
    if sys.argv[1:2] == ["tune"]:
        from llmload.runner.tune import main as tune_main

        sys.argv = ["llmload tune", *sys.argv[2:]]
        raise SystemExit(tune_main(sys.argv[1:]))
    raise SystemExit(runner_main(sys.argv[1:]))
