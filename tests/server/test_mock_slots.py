"""The mock engine's service slots: K requests generate at once, the rest wait in arrival order."""

from __future__ import annotations

import asyncio
import time

import pytest

from server.engines.base import PreparedPrompt, SamplingParams
from server.engines.mock import MockEngine

pytestmark = [pytest.mark.unit, pytest.mark.serial]  # wall-clock bounds of tens of ms


async def _serve(engine: MockEngine, n: int, tokens: int) -> tuple[list[float], list[int]]:
    """Send ``n`` requests at once; (each one's end in seconds from the start in arrival order, waiting seen)."""
    started = time.monotonic()
    ends: list[float] = [0.0] * n
    waiting: list[int] = []

    async def one(i: int) -> None:
        async for _ in engine.generate(f"r{i}", PreparedPrompt("hi", (0,)), SamplingParams(max_tokens=tokens)):
            pass
        ends[i] = time.monotonic() - started

    tasks = [asyncio.create_task(one(i)) for i in range(n)]
    await asyncio.sleep(0.02)
    waiting.append(engine.load().waiting)
    await asyncio.gather(*tasks)
    waiting.append(engine.load().waiting)
    return ends, waiting


def test_k_slots_serve_requests_in_waves_of_k_in_arrival_order():
    # service time S = 60 ms + 2 x 20 ms = 100 ms; 2 slots: three waves of two requests, 100 ms apart
    engine = MockEngine("mock", "mock", ttft_ms=60.0, itl_ms=20.0, slots=2)
    ends, waiting = asyncio.run(_serve(engine, 6, tokens=3))
    assert waiting == [4, 0]  # four queued behind the two slots, none left at the end
    waves = [round(end / 0.1) for end in ends]
    assert waves == [1, 1, 2, 2, 3, 3], ends  # FIFO: the first two first, and so on
    assert engine.info()["slots"] == 2 and engine.load().running == 0


def test_without_slots_every_request_generates_at_once():
    engine = MockEngine("mock", "mock", ttft_ms=60.0, itl_ms=20.0)
    ends, waiting = asyncio.run(_serve(engine, 6, tokens=3))
    assert waiting == [0, 0] and max(ends) == pytest.approx(0.1, abs=0.05)
