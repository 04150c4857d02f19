"""The mock engine's time-correlated speed: a seeded factor per period of wall-clock time, scaling its delays."""

from __future__ import annotations

import asyncio
import math
import time

import numpy as np
import pytest

from server.engines.base import SamplingParams
from server.engines.mock import MockEngine
from server.settings import ServerSettings

pytestmark = pytest.mark.unit


def engine(**kw) -> MockEngine:
    return MockEngine("mock", "mock", ttft_ms=20.0, itl_ms=5.0, **kw)


def test_the_speed_is_constant_unless_a_period_is_set():
    assert engine().slowdown(time.monotonic()) == 1.0
    assert ServerSettings().mock_speed_period_ms == 0.0
    settings = ServerSettings.from_env({"LLMLOAD_MOCK_SPEED_PERIOD_MS": "500", "LLMLOAD_MOCK_SPEED_SD": "0.2"})
    assert (settings.mock_speed_period_ms, settings.mock_speed_sd, settings.mock_speed_seed) == (500.0, 0.2, 0)


def test_the_factor_is_piecewise_constant_seeded_and_lognormal():
    mock = engine(speed_period_ms=100.0, speed_sd=0.3, speed_seed=7)
    start = math.ceil(time.monotonic() + mock.wall_offset) - mock.wall_offset + 0.005  # just past a boundary
    within = [mock.slowdown(start + 0.1 * k + 0.01 * j) for k in range(3) for j in range(9)]
    assert all(len(set(within[9 * k:9 * k + 9])) == 1 for k in range(3))  # one factor per period
    logs = np.log([mock.slowdown(start + 0.1 * k + 0.05) for k in range(2000)])
    assert abs(logs.mean()) < 0.03 and abs(logs.std() - 0.3) < 0.03
    assert abs(np.corrcoef(logs[:-1], logs[1:])[0, 1]) < 0.1  # periods are independent
    again = engine(speed_period_ms=100.0, speed_sd=0.3, speed_seed=7)  # another start: the same sequence
    assert again.slowdown(start + 0.05 + again.wall_offset - mock.wall_offset) == mock.slowdown(start + 0.05)
    other = engine(speed_period_ms=100.0, speed_sd=0.3, speed_seed=8)
    assert other.slowdown(start + 0.05) != mock.slowdown(start + 0.05)


@pytest.mark.serial  # wall-clock bounds
def test_delays_scale_with_the_factor_of_their_period():
    """A period longer than the request: its TTFT and gaps are the base ones times that period's factor."""
    mock = engine(speed_period_ms=2000.0, speed_sd=0.5, speed_seed=3)

    async def timings():
        start = time.monotonic()
        factor = mock.slowdown(start)
        times = [time.monotonic() - start async for _ in mock.generate("r", mock.prepare_completion("hi"),
                                                                           SamplingParams(max_tokens=4))]
        return factor, times, mock.slowdown(time.monotonic())

    for _ in range(5):  # a request that crossed a period boundary is retried
        factor, times, after = asyncio.run(timings())
        if after == factor:
            break
    assert times[0] >= 0.020 * factor - 0.002 and times[0] < 0.020 * factor + 0.05
    assert times[-1] >= (0.020 + 3 * 0.005) * factor - 0.002
