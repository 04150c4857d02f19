"""The open loop's schedule: exact constant spacing, Poisson and gamma gaps with the right spread, seeded."""

import math

import numpy as np
import pytest

from llmload.loadgen.schedule import Schedule

pytestmark = pytest.mark.unit

N = 20000


def starts(rate, arrival="poisson", burstiness=1.0, seed=0, count=N):
    schedule = Schedule(rate, arrival, burstiness, seed)
    schedule.begin(1000.0)
    return np.array([schedule.next()[1] for _ in range(count)])


def test_constant_arrivals_are_exactly_one_over_r_apart():
    gaps = np.diff(starts(50.0, "constant", count=1000))
    assert np.allclose(gaps, 1 / 50.0, rtol=0, atol=1e-9)


@pytest.mark.parametrize("rate", [2.0, 50.0, 400.0])
def test_poisson_rate_and_coefficient_of_variation(rate):
    gaps = np.diff(starts(rate))
    # mean gap within 3 standard errors of 1/R; CV of an exponential is 1 (standard error ~ 1/sqrt(N))
    assert abs(gaps.mean() * rate - 1) < 3 / math.sqrt(N)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.03


def test_gamma_burstiness_sets_the_spread():
    for shape in (0.25, 4.0):
        gaps = np.diff(starts(10.0, "gamma", shape))
        assert abs(gaps.mean() * 10.0 - 1) < 0.05
        assert abs(gaps.std() / gaps.mean() - 1 / math.sqrt(shape)) < 0.08


def test_the_same_seed_gives_the_same_schedule_and_indices_count_up():
    a, b, c = starts(5.0, seed=7, count=50), starts(5.0, seed=7, count=50), starts(5.0, seed=8, count=50)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    schedule = Schedule(1.0, "constant")
    schedule.begin(0.0)
    assert [schedule.next() for _ in range(3)] == [(0, 0.0), (1, 1.0), (2, 2.0)]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        Schedule(0.0)
    with pytest.raises(ValueError):
        Schedule(1.0, "weibull")
