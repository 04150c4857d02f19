"""Warm Locust (tests/warm/llmload_warm.py): a ``python -m locust`` forked from the fork server says, writes and
exits as a cold one does, passes signals on, dies with its client, and starts cold where it cannot start warm.

Each test starts its own fork server on a socket of its own (stopped by PID), so it checks the fork server
whether or not the run around it uses one.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from llmload.core.paths import REPO_ROOT
from locust_helpers import locust_command, write_prompts

pytestmark = pytest.mark.integration

WARM_DIR = REPO_ROOT / "tests" / "warm"
#: CPU a client may take (its own interpreter and the hand-over; a cold start imports Locust: over a second).
WARM_CPU_S = 0.4


@pytest.fixture
def fork_server(tmp_path):
    """A fork server of its own: the environment that sends ``python -m locust`` to it."""
    sock = tmp_path / "locust.sock"
    env = {**os.environ, "PYTHONPATH": str(WARM_DIR)}
    env.pop("LLMLOAD_WARM_LOCUST", None)
    server = subprocess.Popen([sys.executable, "-c", "import llmload_warm; llmload_warm.serve()", str(sock)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()[0]
            time.sleep(0.1)
        yield server, {**env, "LLMLOAD_WARM_LOCUST": str(sock)}
    finally:
        server.kill()
        server.wait(timeout=10)


def run(command: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    """Run to its end: the result, and the CPU seconds of the process itself (the client, when warm)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cold(env: dict) -> dict:
    return {k: v for k, v in env.items() if k != "LLMLOAD_WARM_LOCUST"}


def test_a_warm_locust_says_writes_and_exits_as_a_cold_one(fork_server, fast_mock, tmp_path):
    _server, env = fork_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    commands = {
        "version": [sys.executable, "-m", "locust", "--version"],
        "bad option": locust_command("chat.py", fast_mock, "--headless", "--bogus"),
        "bad suite option": locust_command("chat.py", fast_mock, "--headless", "--requests", "-3"),
    }
    for name, command in commands.items():
        warm_proc, warm_cpu = run(command, env)
        cold_proc, cold_cpu = run(command, cold(env))
        assert (warm_proc.returncode, warm_proc.stdout, warm_proc.stderr) == \
            (cold_proc.returncode, cold_proc.stdout, cold_proc.stderr), name
        assert warm_cpu < WARM_CPU_S < cold_cpu, (name, warm_cpu, cold_cpu)
    # a whole run: the same exit, summary and files (what differs between two runs aside)
    for how, run_env in (("warm", env), ("cold", cold(env))):
        proc, cpu = run(locust_command("chat.py", fast_mock, "--headless", "--only-summary", "-u", "2", "-r", "2",
                                       "--requests", "6", "--max-tokens", "4", "--model", "mock", "--dataset",
                                       str(prompts), "--csv", str(tmp_path / how)), run_env)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"raw log {tmp_path / how}_requests.jsonl" in proc.stderr, proc.stderr[-3000:]
        assert (cpu < WARM_CPU_S) == (how == "warm"), (how, cpu)
        assert Path(f"{tmp_path / how}_summary.json").is_file() and Path(f"{tmp_path / how}_stats.csv").is_file()
        assert len(Path(f"{tmp_path / how}_requests.jsonl").read_text().splitlines()) == 6


def test_a_run_lasts_its_run_time_however_old_the_server_is(fork_server, fast_mock, tmp_path):
    """The server's event loop was made when it imported Locust: its clock must not date a child's timers."""
    server, env = fork_server
    time.sleep(max(0.0, psutil.Process(server.pid).create_time() + 4 - time.time()))
    start = time.monotonic()
    proc, _cpu = run(locust_command("chat.py", fast_mock, "--headless", "--only-summary", "-u", "1", "-t", "3s",
                                    "--max-tokens", "4", "--model", "mock",
                                    "--dataset", str(write_prompts(tmp_path / "chat.jsonl")),
                                    "--csv", str(tmp_path / "run")), env)
    assert proc.returncode == 0 and children(server) == [], proc.stderr[-3000:]
    assert time.monotonic() - start >= 3 and len(Path(f"{tmp_path}/run_requests.jsonl").read_text().splitlines()) > 3


def children(server: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(server.pid).children()


def started(command: list[str], env: dict, server: subprocess.Popen) -> tuple[subprocess.Popen, psutil.Process]:
    """Start ``command`` warm: the client, and its child under the fork server."""
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 30
    while not children(server):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    return proc, children(server)[0]


def test_signals_reach_the_child_and_a_killed_client_or_child_takes_the_other_along(fork_server, fast_mock, tmp_path):
    server, env = fork_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    command = locust_command("chat.py", fast_mock, "--headless", "--only-summary", "-u", "1", "-t", "60s",
                             "--max-tokens", "4", "--model", "mock", "--dataset", str(prompts),
                             "--csv", str(tmp_path / "run"))
    proc, child = started(command, env, server)
    time.sleep(3)  # running
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    assert Path(f"{tmp_path / 'run'}_summary.json").is_file()  # it stopped as a Ctrl-C'd Locust does, and wrote
    assert not child.is_running()

    proc, child = started(command, env, server)
    proc.kill()
    proc.wait(timeout=10)
    child.wait(timeout=10)  # psutil.TimeoutExpired if it outlived its client
    assert proc.returncode == -signal.SIGKILL

    proc, child = started(command, env, server)  # the child killed by its own PID: the client ends by that signal
    child.kill()
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_another_interpreter_setting_starts_cold(fork_server):
    server, env = fork_server
    proc, cpu = run([sys.executable, "-m", "locust", "--version"], {**env, "PYTHONHASHSEED": "7"})
    assert proc.returncode == 0 and proc.stdout.startswith("locust ") and cpu > WARM_CPU_S, (proc.stdout, cpu)
    assert not children(server)
