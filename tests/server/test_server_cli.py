"""The two ways to start the server: ``python -m server`` (flags) and ``uvicorn server.app:app`` (environment).

User errors (a busy port, a bad host, a bad flag or environment value, a model
that cannot load) end with one ``error:`` line and a non-zero status, never a
traceback.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import httpx
import pytest

from llmload.core.services import ServiceProcess, free_port
from server.engines.hf_model import check_local_model
from server_client import post_ok, response_text


def run_server_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith(("error:", "usage:")) or
              ": error:" in line]
    assert errors, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


def test_help_lists_every_setting():
    result = run_server_cli("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--model", "--engine", "--host", "--port", "--max-model-len", "--api-key", "--mock-ttft-ms",
                 "--mock-itl-ms", "--served-model-name", "LLMLOAD_"):
        assert flag in result.stdout, flag


def test_port_in_use_is_a_one_line_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_server_cli("--engine", "mock", "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 2
    assert_one_line_error(result, f"port {port} is already in use")


@pytest.mark.parametrize("args, fragment", [
    (["--host", "no.such.host.invalid"], "cannot listen on no.such.host.invalid"),
    (["--port", "70000"], "out of range"),
    (["--engine", "bogus"], "invalid choice"),
    (["--port", "eighty"], "invalid int value"),
    (["--max-model-len", "0"], "--max-model-len must be at least 1"),
], ids=["bad-host", "port-out-of-range", "bad-engine", "bad-port", "bad-context"])
def test_bad_flags_are_one_line_errors(args, fragment):
    assert_one_line_error(run_server_cli("--engine", "mock", *args), fragment)


def test_bad_environment_value_is_a_one_line_error():
    assert_one_line_error(run_server_cli("--help", env={"LLMLOAD_PORT": "abc"}), "LLMLOAD_PORT='abc'")


def test_model_that_cannot_load_is_a_one_line_error(tmp_path):
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    result = run_server_cli("--engine", "naive", "--port", str(free_port()), "--model", str(empty))
    assert result.returncode == 2
    assert_one_line_error(result, "cannot start the naive engine", str(empty), "has no config.json")


def test_missing_model_folder_says_what_to_do(tmp_path):
    result = run_server_cli("--engine", "naive", "--port", str(free_port()), "--model", "./models/not-materialised")
    assert result.returncode == 2
    assert_one_line_error(result, "no model folder at ./models/not-materialised", "make model")


@pytest.mark.model
def test_local_model_check_lets_hub_ids_through(tmp_path, default_model):
    with pytest.raises(FileNotFoundError, match="no model folder at"):
        check_local_model(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="no model folder at"):
        check_local_model("./models/not-there")
    for hub_id_or_folder in ("gpt2", "meta-llama/Llama-2-7b-chat-hf", default_model):
        check_local_model(hub_id_or_folder)


def start_and_check(tmp_path, name: str, command: list[str], env: dict, port: int) -> None:
    """Start a server process, check the environment reached it, ask one question, stop it."""
    with ServiceProcess(name, command, f"http://127.0.0.1:{port}/health", tmp_path / f"{name}.log",
                        env=env) as proc:
        proc.start()
        proc.wait_ready(60)
        base = f"http://127.0.0.1:{port}"
        health = httpx.get(base + "/health").json()
        assert (health["engine"], health["model"], health["ttft_ms"], health["itl_ms"]) == ("mock", "env-mock", 5, 1)
        assert health["max_model_len"] == 128
        answer = post_ok(base, "/v1/completions", {"model": "env-mock", "prompt": "hi", "max_tokens": 3})
        assert response_text(answer) == " the quick brown"


MOCK_ENV = {"LLMLOAD_ENGINE": "mock", "LLMLOAD_SERVED_MODEL_NAME": "env-mock", "LLMLOAD_MOCK_TTFT_MS": "5",
            "LLMLOAD_MOCK_ITL_MS": "1", "LLMLOAD_MAX_MODEL_LEN": "128"}


def test_uvicorn_route_reads_the_environment(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)]
    start_and_check(tmp_path, "uvicorn", command, MOCK_ENV, port)


def test_module_flags_default_to_the_environment(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "server", "--host", "127.0.0.1", "--port", str(port)]
    start_and_check(tmp_path, "module", command, MOCK_ENV, port)
