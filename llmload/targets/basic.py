"""The basic server (``python -m server``) with each of its engines, as servers under test."""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import replace
from typing import Sequence

from llmload.core.cliargs import CLIError, option_fields, parse_value, to_argv
from llmload.targets.base import TargetKind, TargetSettings
from server.settings import ServerSettings

#: ``python -m server``'s flags a tune does not set: the runner sets them (the model and its name, the engine,
#: where it listens, its log level), or they would lock the load generator out (the API key).
RUNNER_FLAGS = ("model", "served_model_name", "engine", "host", "port", "log_level", "api_key")
#: The flags only some engines read (the mock's own are its ``mock_*`` ones); the others ignore them.
ENGINE_FLAGS = {"max_num_seqs": ("batched",), "prepack_weights": ("batched",), "threads": ("naive", "batched"),
                "dtype": ("naive", "batched")}


def basic_server_command(engine: str = "naive", port: int = 8000, model: str | None = None,
                         extra: Sequence[str] = ()) -> list[str]:
    """The command line that starts the basic server with this interpreter on ``127.0.0.1:port``."""
    cmd = [sys.executable, "-m", "server", "--engine", engine, "--host", "127.0.0.1", "--port", str(port)]
    if model:
        cmd += ["--model", model]
    return cmd + list(extra)


class BasicServer(TargetKind):
    """``python -m server --engine ENGINE`` with the comparison's model, context, dtype and threads."""

    tune_flags = "server"

    def __init__(self, name: str, engine: str, description: str, flags: Sequence[str] = ()):
        self.name, self.engine, self.description, self.flags = name, engine, description, tuple(flags)
        self.needs_model = engine != "mock"

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        extra = ["--max-model-len", str(settings.max_model_len), "--log-level", "warning", *self.flags]
        if self.engine == "mock":
            extra += ["--mock-ttft-ms", f"{settings.mock_ttft_ms:g}", "--mock-itl-ms", f"{settings.mock_itl_ms:g}"]
        else:
            extra += ["--served-model-name", settings.served_model_name, "--dtype", settings.dtype]
            if settings.threads:
                extra += ["--threads", str(settings.threads)]
            if self.engine == "batched" and settings.max_num_seqs:
                extra += ["--max-num-seqs", str(settings.max_num_seqs)]
        model = settings.model if self.needs_model else None
        return basic_server_command(self.engine, port, model=model, extra=[*extra, *settings.extra_args])

    def tuned(self, settings: TargetSettings, flags: Sequence[tuple[str, str | bool]]) -> TargetSettings:
        """The settings with ``python -m server`` flags on top: those the runner passes from its own settings
        (``--max-num-seqs``, ``--mock-ttft-ms``, ...) set there, any other appended as a flag; each value read as
        the server reads it."""
        server = {f.name: f for f in option_fields(ServerSettings)}
        ours = {f.name: f for f in option_fields(TargetSettings)}
        changes: dict = {}
        extra: list[str] = []
        for key, value in flags:
            name = key.lstrip("-").replace("-", "_")
            flag = "--" + name.replace("_", "-")
            f = server.get(name)
            if f is None:
                close = difflib.get_close_matches(name, [n for n in server if n not in RUNNER_FLAGS], n=1)
                hint = f" (did you mean {close[0].replace('_', '-')}?)" if close else " (python -m server --help)"
                raise CLIError(f"{self.name}: the basic server has no flag {flag}{hint}")
            if name in RUNNER_FLAGS:
                raise CLIError(f"{self.name}: {flag} is the runner's to set, not a setting to tune")
            engines = ("mock",) if name.startswith("mock_") else ENGINE_FLAGS.get(name, (self.engine,))
            if self.engine not in engines:
                raise CLIError(f"{self.name}: {flag} applies to the {' and '.join(engines)} engine only")
            text = "true" if value is True else "false" if value is False else str(value)
            try:
                if name in ours:
                    changes[name] = parse_value(ours[name], text)
                else:
                    extra += to_argv(ServerSettings(**{name: parse_value(f, text)}), [name])
            except argparse.ArgumentTypeError as exc:
                raise CLIError(f"{self.name}: {flag} {text}: {exc}") from None
        return replace(settings, **changes, extra_args=(*settings.extra_args, *extra))

    def memory_gib(self, settings: TargetSettings) -> float:
        """The mock: a small Python process; the model engines: 1.1-2.4 GiB measured at 8 users (docs/runner.md)."""
        return 0.3 if self.engine == "mock" else 2.5
