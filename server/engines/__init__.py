"""Serving engines behind one interface (:class:`server.engines.base.Engine`).

``naive``: transformers, one request at a time (the seed's basic script).
``batched``: transformers with continuous batching, up to ``max_num_seqs`` requests at once.
``mock``: no model, tokens on a configurable schedule (tests, calibration).
"""

from __future__ import annotations

from server.engines.base import Engine
from server.settings import ENGINES, ServerSettings

__all__ = ["ENGINES", "Engine", "create_engine"]


def create_engine(settings: ServerSettings) -> Engine:
    """Build the engine named by ``settings.engine`` (the model is loaded later, by ``start``)."""
    if settings.engine == "naive":
        from server.engines.naive import NaiveEngine  # torch: only the engine asked for

        return NaiveEngine(settings.resolved_model(), settings.served_name(), settings.max_model_len,
                           dtype=settings.dtype, threads=settings.threads)
    if settings.engine == "batched":
        from server.engines.batched import BatchedEngine  # torch: only the engine asked for

        return BatchedEngine(settings.resolved_model(), settings.served_name(), settings.max_model_len,
                             dtype=settings.dtype, threads=settings.threads, max_num_seqs=settings.max_num_seqs,
                             prepack_weights=settings.prepack_weights)
    if settings.engine == "mock":
        from server.engines.mock import MockEngine  # only the engine asked for

        return MockEngine(settings.model or "mock", settings.served_name(), settings.max_model_len,
                          ttft_ms=settings.mock_ttft_ms, itl_ms=settings.mock_itl_ms,
                          reasoning_tokens=settings.mock_reasoning_tokens,
                          reasoning_field=settings.mock_reasoning_field,
                          tokens_per_chunk=settings.mock_tokens_per_chunk, slots=settings.mock_slots,
                          speed_period_ms=settings.mock_speed_period_ms, speed_sd=settings.mock_speed_sd,
                          speed_seed=settings.mock_speed_seed)
    raise ValueError(f"unknown engine {settings.engine!r} (choose from {', '.join(ENGINES)})")
