"""Server settings: one dataclass whose fields (:func:`llmload.core.cliargs.option`) build both the
``python -m server`` flags and the ``LLMLOAD_*`` environment variables, so each default and help text exists once.

``uvicorn server.app:app`` reads the environment (:meth:`ServerSettings.from_env`);
``python -m server`` parses flags (:meth:`ServerSettings.add_arguments`) whose
defaults are those environment values, so both routes agree.
"""

from __future__ import annotations

import argparse
from dataclasses import Field, dataclass
from typing import Any, Callable, Sequence

from llmload.core import cliargs
from llmload.core.cliargs import CLIError, non_negative_float, non_negative_int, positive_int
from llmload.core.model_store import resolve_model, served_model_name

ENV_PREFIX = "LLMLOAD_"
ENGINES = ("naive", "batched", "mock")
DTYPES = ("auto", "float32", "bfloat16", "float16")
LOG_LEVELS = ("debug", "info", "warning", "error")
REASONING_FIELDS = ("reasoning", "reasoning_content")


def setting(default: Any, help: str, *, type: Callable[[str], Any] | None = None,
            choices: Sequence[str] | None = None, flag: str | None = None) -> Any:
    """A settings field: its default, its ``--help`` text (``%(default)s`` allowed), how a value is parsed.

    ``flag`` names the switch that turns a True boolean off (``--no-prepack-weights``).
    """
    if flag:
        return cliargs.option(default, help, flag=flag, action="store_false")
    return cliargs.option(default, help, type=type, choices=choices)


@dataclass
class ServerSettings:
    """Everything the server needs to start; see ``python -m server --help``."""

    model: str | None = setting(
        None, "Hugging Face id or local model folder (default: the embedded SmolLM2-135M-Instruct)")
    served_model_name: str | None = setting(
        None, "model id clients send and /v1/models lists (default: the model folder's name; 'mock' for the mock "
              "engine without --model)")
    engine: str = setting(
        "naive", "naive: transformers, one request at a time; batched: transformers, continuous batching; "
                 "mock: no model, fixed timings (default: %(default)s)", choices=ENGINES)
    host: str = setting("0.0.0.0", "bind address (default: %(default)s)")
    port: int = setting(8000, "port (default: %(default)s)", type=non_negative_int)
    max_model_len: int | None = setting(None, "context length limit (default: the model's own)", type=positive_int)
    dtype: str = setting("auto", "weights dtype (default: %(default)s = the checkpoint's)", choices=DTYPES)
    threads: int | None = setting(
        None, "torch CPU threads of the worker thread that runs the model (default: torch's, one per core); "
              "/health reports the count in effect", type=positive_int)
    max_num_seqs: int = setting(
        32, "batched engine: most requests decoded together; more wait (default: %(default)s)", type=positive_int)
    prepack_weights: bool = setting(
        True, "batched engine: keep linear weights in their plain layout instead of oneDNN's blocked one "
              "(slower decode steps; to measure what packing brings)", flag="--no-prepack-weights")
    api_key: str | None = setting(None, "require 'Authorization: Bearer KEY' on /v1/*")
    header_timeout_s: float = setting(
        10.0, "seconds a connection may take to send complete request headers, from its start or from the end of "
              "the previous answer, before it is closed; 0 = no limit (python -m server only: uvicorn's own command "
              "line cannot install it) (default: %(default)s)", type=non_negative_float)
    body_timeout_s: float = setting(
        30.0, "seconds a request body may take to arrive once its headers are in; later: 408 and the connection "
              "closed; 0 = no limit (default: %(default)s)", type=non_negative_float)
    max_body_bytes: int = setting(
        4 * 2**20, "largest request body in bytes; a larger one gets 413, decided from Content-Length before "
                   "reading or by counting a chunked body; 0 = no limit (default: %(default)s = 4 MiB)",
        type=non_negative_int)
    mock_ttft_ms: float = setting(200.0, "mock engine: time to first token in ms (default: %(default)s)",
                                  type=non_negative_float)
    mock_itl_ms: float = setting(20.0, "mock engine: time between tokens in ms (default: %(default)s)",
                                 type=non_negative_float)
    mock_reasoning_tokens: int = setting(
        0, "mock engine: the first N tokens of every answer are reasoning, streamed in the chat delta field "
           "--mock-reasoning-field and in Responses' reasoning items, counted in usage's reasoning tokens "
           "(default: %(default)s)", type=non_negative_int)
    mock_reasoning_field: str = setting(
        "reasoning", "mock engine: the chat field that carries reasoning: reasoning (vLLM's since 2025-11) or "
                     "reasoning_content (DeepSeek, older vLLM) (default: %(default)s)",
        choices=REASONING_FIELDS)
    mock_tokens_per_chunk: int = setting(
        1, "mock engine: tokens sent together in one chunk, each chunk when its last token is due (as speculative "
           "decoding or coalescing servers send them) (default: %(default)s)", type=positive_int)
    mock_slots: int = setting(
        0, "mock engine: requests generating at once (K service slots); the others wait in a FIFO queue, so with "
           "requests of one length the server holds exactly K / (ttft + (tokens - 1) x itl) requests/s; 0 = no "
           "limit (default: %(default)s)", type=non_negative_int)
    mock_speed_period_ms: float = setting(
        0.0, "mock engine: every this many ms of wall-clock time its delays change by a seeded random factor "
             "(lognormal, --mock-speed-sd), as a real server's speed drifts with its batches; 0 = constant speed "
             "(default: %(default)s)", type=non_negative_float)
    mock_speed_sd: float = setting(0.3, "mock engine: log-scale standard deviation of that factor "
                                        "(default: %(default)s)", type=non_negative_float)
    mock_speed_seed: int = setting(0, "mock engine: seed of those factors (default: %(default)s)",
                                   type=non_negative_int)
    log_level: str = setting("info", "log level (default: %(default)s)", choices=LOG_LEVELS)

    # ------------------------------------------------------------------ the environment and the command line

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "ServerSettings":
        """Settings from ``LLMLOAD_MODEL``, ``LLMLOAD_ENGINE``, ``LLMLOAD_PORT``, ... (unset or empty = default).

        A value that does not parse ends the program with one ``error:`` line (exit code 2).
        """
        try:
            return cls(**cliargs.read_env(cls, ENV_PREFIX, environ))
        except CLIError as exc:
            cliargs.fail(str(exc))

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, defaults: "ServerSettings") -> None:
        """One flag per field (``--max-num-seqs`` for ``max_num_seqs``), defaulting to ``defaults``' value."""
        cliargs.add_options(parser, cls, defaults=defaults)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ServerSettings":
        """Settings from parsed :meth:`add_arguments` flags."""
        return cliargs.from_namespace(cls, args)

    # ------------------------------------------------------------------ derived values

    def resolved_model(self) -> str:
        """The model to load: the materialised default when none is set."""
        return resolve_model(self.model)

    def served_name(self) -> str:
        """The id clients send as ``model`` and see in ``/v1/models``."""
        if self.served_model_name:
            return self.served_model_name
        if self.engine == "mock" and not self.model:
            return "mock"
        return served_model_name(self.model)


def env_name(f: Field) -> str:
    """The environment variable of a settings field (``LLMLOAD_MAX_NUM_SEQS``)."""
    return cliargs.env_name(f, ENV_PREFIX)
