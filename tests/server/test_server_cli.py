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
from dataclasses import fields

import httpx
import pytest

from llmload.core.model_store import served_model_name
from llmload.core.services import ServiceProcess, free_port
from server.__main__ import build_parser
from server.engines.hf_model import check_local_model
from server.settings import ServerSettings, env_name
from server_client import post_ok, response_text

#: Commands run to completion, no wall-clock bound: beside the serial part at idle CPU priority (docs/testing.md).
pytestmark = pytest.mark.background


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


@pytest.mark.integration
def test_help_lists_every_setting():
    result = run_server_cli("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--model", "--engine", "--host", "--port", "--max-model-len", "--api-key", "--mock-ttft-ms",
                 "--mock-itl-ms", "--served-model-name", "LLMLOAD_"):
        assert flag in result.stdout, flag


@pytest.mark.integration
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
    (["--port", "eighty"], "argument --port: 'eighty' is not an integer >= 0"),
    (["--max-model-len", "0"], "argument --max-model-len: '0' is not an integer >= 1"),
    (["--max-num-seqs", "0"], "argument --max-num-seqs: '0' is not an integer >= 1"),
    (["--mock-itl-ms", "-1"], "argument --mock-itl-ms: '-1' is not a number >= 0"),
], ids=["bad-host", "port-out-of-range", "bad-engine", "bad-port", "bad-context", "bad-batch", "bad-delay"])
@pytest.mark.integration
def test_bad_flags_are_one_line_errors(args, fragment):
    assert_one_line_error(run_server_cli("--engine", "mock", *args), fragment)


@pytest.mark.parametrize("env, fragment", [
    ({"LLMLOAD_PORT": "abc"}, "LLMLOAD_PORT='abc': 'abc' is not an integer >= 0"),
    ({"LLMLOAD_ENGINE": "bogus"}, "LLMLOAD_ENGINE='bogus': 'bogus' is not one of naive, batched, mock"),
    ({"LLMLOAD_PREPACK_WEIGHTS": "maybe"}, "LLMLOAD_PREPACK_WEIGHTS='maybe': 'maybe' is not an on/off value"),
], ids=["port", "engine", "switch"])
@pytest.mark.integration
def test_bad_environment_value_is_a_one_line_error(env, fragment):
    assert_one_line_error(run_server_cli("--help", env=env), fragment)


#: A non-default value for every setting, as its environment variable spells it.
NON_DEFAULT = {"model": "some/model", "served_model_name": "x", "engine": "batched", "host": "127.0.0.2",
               "port": "8123", "max_model_len": "512", "dtype": "float32", "threads": "1", "max_num_seqs": "4",
               "prepack_weights": "off", "api_key": "k", "header_timeout_s": "3", "body_timeout_s": "0",
               "max_body_bytes": "1000", "mock_ttft_ms": "5", "mock_itl_ms": "1.5", "log_level": "warning",
               "mock_reasoning_tokens": "3", "mock_reasoning_field": "reasoning_content", "mock_tokens_per_chunk": "2",
               "mock_slots": "3", "mock_speed_period_ms": "500", "mock_speed_sd": "0.5", "mock_speed_seed": "7"}


@pytest.mark.unit
def test_flags_and_environment_agree():
    """Each setting reads the same from its LLMLOAD_* variable and from its flag, and both default alike."""
    defaults = ServerSettings()
    parser = build_parser(defaults)
    assert ServerSettings.from_env({}) == defaults == ServerSettings.from_args(parser.parse_args([]))
    environ = {env_name(f): NON_DEFAULT[f.name] for f in fields(ServerSettings)}  # a new setting needs a value here
    flags = []
    for f in fields(ServerSettings):
        if f.metadata["flag"]:
            flags.append(f.metadata["flag"])
        else:
            flags += ["--" + f.name.replace("_", "-"), NON_DEFAULT[f.name]]
    from_env = ServerSettings.from_env(environ)
    assert from_env == ServerSettings.from_args(parser.parse_args(flags))
    assert [f.name for f in fields(ServerSettings) if getattr(from_env, f.name) == f.default] == []
    # The environment is also the flags' default.
    assert ServerSettings.from_args(build_parser(from_env).parse_args([])) == from_env


@pytest.mark.unit
def test_served_name_follows_the_model_store(tmp_path):
    assert ServerSettings(engine="mock").served_name() == "mock"
    assert ServerSettings().served_name() == served_model_name(None)
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert ServerSettings(model=str(folder) + "/").served_name() == "my-model"
    assert ServerSettings(model="org/hub-model", served_model_name="alias").served_name() == "alias"


@pytest.mark.integration
def test_model_that_cannot_load_is_a_one_line_error(tmp_path):
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    result = run_server_cli("--engine", "naive", "--port", str(free_port()), "--model", str(empty))
    assert result.returncode == 2
    assert_one_line_error(result, "cannot start the naive engine", str(empty), "has no config.json")


@pytest.mark.integration
def test_missing_model_folder_says_what_to_do(tmp_path):
    result = run_server_cli("--engine", "naive", "--port", str(free_port()), "--model", "./models/not-materialised")
    assert result.returncode == 2
    assert_one_line_error(result, "no model folder at ./models/not-materialised", "make model")


@pytest.mark.model
@pytest.mark.unit
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


@pytest.mark.integration
def test_uvicorn_route_reads_the_environment(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)]
    start_and_check(tmp_path, "uvicorn", command, MOCK_ENV, port)


@pytest.mark.integration
def test_module_flags_default_to_the_environment(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "server", "--host", "127.0.0.1", "--port", str(port)]
    start_and_check(tmp_path, "module", command, MOCK_ENV, port)
