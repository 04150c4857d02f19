"""Server settings, from ``LLMLOAD_*`` environment variables or ``python -m server`` flags.

``uvicorn server.app:app`` reads the environment; ``python -m server`` parses
flags whose defaults are the same environment variables, so both routes agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

ENV_PREFIX = "LLMLOAD_"


def _flag(text: str) -> bool:
    """An on/off environment value: 1/true/yes/on or 0/false/no/off."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(text)


_flag.__name__ = "on/off value (1/0, true/false, yes/no, on/off)"


def _env(name: str, default=None, cast=str):
    raw = os.environ.get(ENV_PREFIX + name.upper())
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError:
        raise SystemExit(f"error: {ENV_PREFIX}{name.upper()}={raw!r} is not a valid {cast.__name__}") from None


@dataclass
class ServerSettings:
    """Everything the server needs to start; see ``python -m server --help``."""

    model: str | None = None  # HF id or local path; None = the embedded default model
    served_model_name: str | None = None  # name in /v1/models (default: the model's folder name)
    engine: str = "naive"
    host: str = "0.0.0.0"
    port: int = 8000
    max_model_len: int | None = None
    dtype: str = "auto"
    threads: int | None = None
    max_num_seqs: int = 32  # batched engine: most requests decoded together
    prepack_weights: bool = True  # batched engine: linear weights in oneDNN's layout
    api_key: str | None = None
    mock_ttft_ms: float = 200.0
    mock_itl_ms: float = 20.0
    log_level: str = "info"

    @classmethod
    def from_env(cls) -> "ServerSettings":
        """Settings from ``LLMLOAD_MODEL``, ``LLMLOAD_ENGINE``, ``LLMLOAD_PORT``, ... (unset = default)."""
        values = {}
        for f in fields(cls):
            default = f.default
            cast = {int: int, float: float, bool: _flag}.get(type(default), str)
            if f.name in ("port", "max_model_len", "threads"):
                cast = int
            values[f.name] = _env(f.name, default, cast)
        return cls(**values)

    def resolved_model(self) -> str:
        """The model to load: the materialised default when none is set."""
        from llmload.core.model_store import resolve_model

        return resolve_model(self.model)

    def served_name(self) -> str:
        """The id clients send as ``model`` and see in ``/v1/models``."""
        if self.served_model_name:
            return self.served_model_name
        if self.engine == "mock" and not self.model:
            return "mock"
        from llmload.core.model_store import DEFAULT_ALIASES, DEFAULT_MODEL_NAME

        if self.model is None or self.model.lower() in DEFAULT_ALIASES:
            return DEFAULT_MODEL_NAME
        return self.model.rstrip("/").split("/")[-1] if os.path.isdir(self.model) else self.model
