"""What a server under test is: a kind (how it starts), a target (a named use of a kind), a running target.

A :class:`TargetKind` holds everything that differs between servers: the
command and environment that start it, its health and metrics paths, whether
it needs a model folder, and whether it can run here at all. The runner and
the benchmarks start every server through :func:`start_target`, so adding a
server kind is one new file with its class plus one entry in
:mod:`llmload.targets.registry`.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from llmload.core.cliargs import CLIError, non_negative_float, non_negative_int, option, positive_float, positive_int
from llmload.core.defaults import (KV_CACHE_GIB, MAX_MODEL_LEN, SERVER_START_TIMEOUT_S, SERVER_THREADS,
                                   VLLM_START_TIMEOUT_S)
from llmload.core.services import ServiceError, ServiceProcess, free_port, http_ok, local_url
from server.settings import DTYPES


@dataclass(frozen=True)
class TargetSettings:
    """What every server started for one comparison shares; each field with a help text is also the runner's and
    the benchmarks' server option of that name (:func:`llmload.core.cliargs.add_options`), the one default."""

    model: str | None = option(None, "model id or folder (default: the embedded SmolLM2-135M-Instruct)")
    served_model_name: str = "mock"  # the id every server serves the model under
    max_model_len: int = option(MAX_MODEL_LEN, "context limit on every server", type=positive_int, metavar="N")
    dtype: str = option("float32", "weights dtype on every started server (default: %(default)s, the checkpoint's "
                        "own; vLLM on CPU would pick bfloat16, which degrades this small model's outputs)",
                        choices=DTYPES)
    threads: int = option(SERVER_THREADS, "torch threads of the basic server (default: %(default)s = cores - 1, as "
                          "vLLM on CPU keeps one core for its API server; 0 = torch's default)",
                          type=non_negative_int, metavar="N")
    max_num_seqs: int | None = option(None, "batch cap of the batched engine and vLLM alike (unset: each server's "
                                      "own)", type=positive_int, metavar="N")
    kv_cache_gib: float = option(KV_CACHE_GIB, "vLLM on CPU: KV cache GiB", type=positive_float, metavar="GIB")
    mock_ttft_ms: float = option(50.0, "mock server: time to first token", type=non_negative_float, metavar="MS")
    mock_itl_ms: float = option(10.0, "mock server: time between tokens", type=non_negative_float, metavar="MS")
    start_timeout: float = option(SERVER_START_TIMEOUT_S, "seconds to wait for a basic server to start",
                                  type=positive_float, metavar="S")
    vllm_timeout: float = option(VLLM_START_TIMEOUT_S, "seconds to wait for vLLM to start", type=positive_float,
                                 metavar="S")
    vllm_args: tuple[str, ...] = option((), "more arguments for vLLM's server, one shell-quoted string, given as "
                                        "--vllm-args='--enforce-eager' (a value starting with -- needs the =)",
                                        type=lambda text: tuple(shlex.split(text)), metavar="ARGS")
    extra_args: tuple[str, ...] = ()
    otlp_traces_endpoint: str = ""  # the runner's span receiver (--otel-receiver): servers that trace export there


class TargetKind(ABC):
    """How one kind of server is started and probed."""

    name: str = ""
    description: str = ""
    needs_model: bool = True
    health_path: str = "/health"
    metrics_path: str | None = "/metrics"  # Prometheus text, where the server has it
    external: bool = False  # already running at a URL: never started nor stopped here
    prefix_caching: bool | None = None  # its prefix cache on or off; None: no prefix cache to switch
    #: Whose flags a tune's configuration of this kind sets (``llmload tune``): "server" (``python -m server``'s:
    #: ``--grid``), "vllm" (``vllm serve``'s: ``--vllm-args-set``); None: none.
    tune_flags: str | None = None

    def unavailable(self) -> str | None:
        """Why this kind cannot run here (one line), or None."""
        return None

    @abstractmethod
    def command(self, settings: TargetSettings, port: int) -> list[str]:
        """The command line that starts the server on ``127.0.0.1:port``."""

    def env(self, settings: TargetSettings) -> dict[str, str]:
        return {}

    def traces(self, settings: TargetSettings) -> bool:
        """Whether this kind, started with ``settings``, exports a span per request to their OTLP endpoint."""
        return False

    def start_timeout(self, settings: TargetSettings) -> float:
        return settings.start_timeout

    def tuned(self, settings: TargetSettings, flags: Sequence[tuple[str, str | bool]]) -> TargetSettings:
        """``settings`` with one tune configuration's own flags on top: ``(name, value)`` pairs, the flag's name
        without its dashes, True for a switch given bare. Raises :class:`CLIError` (one line) for a flag this kind
        does not take or a value it cannot read."""
        if flags:
            raise CLIError(f"{self.name}: a tune cannot set its flags (the suite knows none of them)")
        return settings

    def memory_gib(self, settings: TargetSettings) -> float:
        """Memory the server's process tree needs at its peak, before it has been measured (GiB; docs/runner.md)."""
        return 2.5


@dataclass(frozen=True)
class Target:
    """One server of a comparison: a name, and a kind to start or the URL of one already running."""

    name: str
    kind: str
    url: str | None = None


@dataclass
class RunningTarget:
    """A started (or reached) server: its base URL and, when started here, its process."""

    name: str
    kind: TargetKind
    base_url: str
    process: ServiceProcess | None = None
    ready_s: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def metrics_url(self) -> str | None:
        return self.base_url + self.kind.metrics_path if self.kind.metrics_path else None

    def alive(self) -> bool:
        return self.process is None or self.process.alive()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def start_target(target: Target, kind: TargetKind, settings: TargetSettings, log_path: Path,
                 progress: bool = True) -> RunningTarget:
    """Start ``target`` (or check that its URL answers) and wait until it is healthy.

    Raises :class:`ServiceError` with one first line that says what went wrong.
    """
    if kind.external or target.url:
        url = (target.url or "").rstrip("/")
        if not url:
            raise ServiceError(f"{target.name}: give its URL as {target.name}=http://host:port")
        if not http_ok(f"{url}/v1/models"):
            raise ServiceError(f"{target.name} at {url} does not answer /v1/models: start it first")
        return RunningTarget(target.name, kind, url)
    reason = kind.unavailable()
    if reason:
        raise ServiceError(reason)
    port = free_port()
    process = ServiceProcess(target.name, kind.command(settings, port), local_url(port, kind.health_path), log_path,
                             env=kind.env(settings))
    try:
        process.start()
        ready = process.wait_ready(kind.start_timeout(settings), progress=progress)
    except BaseException:
        process.stop()
        raise
    return RunningTarget(target.name, kind, local_url(port), process, ready_s=ready)
