"""The basic server (``python -m server``) with each of its engines, as servers under test."""

from __future__ import annotations

import sys
from typing import Sequence

from llmload.targets.base import TargetKind, TargetSettings


def basic_server_command(engine: str = "naive", port: int = 8000, model: str | None = None,
                         extra: Sequence[str] = ()) -> list[str]:
    """The command line that starts the basic server with this interpreter on ``127.0.0.1:port``."""
    cmd = [sys.executable, "-m", "server", "--engine", engine, "--host", "127.0.0.1", "--port", str(port)]
    if model:
        cmd += ["--model", model]
    return cmd + list(extra)


class BasicServer(TargetKind):
    """``python -m server --engine ENGINE`` with the comparison's model, context, dtype and threads."""

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

    def memory_gib(self, settings: TargetSettings) -> float:
        """The mock: a small Python process; the model engines: 1.1-2.4 GiB measured at 8 users (docs/runner.md)."""
        return 0.3 if self.engine == "mock" else 2.5
