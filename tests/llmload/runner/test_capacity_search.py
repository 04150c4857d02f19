"""The capacity search's decisions on scripted attainment and scripted queues (no process starts).

The search is driven through :func:`llmload.runner.capacity.search_cells`, the
loop the runner itself runs, with each look's measurement scripted.
"""

from __future__ import annotations

import numpy as np
import pytest

from llmload.core.metrics import SLO, RequestResult, summarize
from llmload.core.runfiles import ERROR_RATE, Cell
from llmload.core.sequential import (FAILED, HELD, UNDECIDED, Budget, Look, Trend, attainment_bounds, backlog,
                                     decide, interval_at, requests_to_hold, trend)
from llmload.runner.capacity import TOLERANCE, CapacitySearch, Probe, failed_because, look_of, search_cells

pytestmark = pytest.mark.unit

BUDGET = Budget(steps=8, looks=4)
FIRST = 40  # requests of a step's first look; later looks send 80, 160, 320


def look_requests(look: int) -> int:
    return FIRST * 2 ** look


def run_search(search: CapacitySearch, answer) -> list[tuple[float, int]]:
    """Drive the runner's loop with ``answer(rate, look, requests) -> Look``; the (rate, look) asked for."""
    asked: list[tuple[float, int]] = []
    steps = search_cells(search, lambda probe: probe,
                         lambda probe, look: look)
    try:
        probe = next(steps)
        while True:
            asked.append((probe.rate, probe.look))
            probe = steps.send(answer(probe.rate, probe.look, look_requests(probe.look)))
    except StopIteration:
        pass
    return asked


def steady(growth_per_s: float = 0.0) -> Trend:
    """A backlog trend whose least-squares slope is ``growth_per_s`` +- 0.05 req/s (10 bins)."""
    return Trend("backlog", 0.5, 0.0, 0.0, 10, growth_per_s, 0.05)


def sharp(capacity: float, below: float = 1.0, above: float = 0.5):
    """Every request meets the SLO up to ``capacity``; a share ``above`` of them beyond it; a steady backlog."""
    def answer(rate, look, n):
        share = below if rate <= capacity else above
        return Look(n, round(share * n), trends=[steady()], prefix=f"r{rate:g}")
    return answer


# --------------------------------------------------------------------------- the sequential decision


def test_a_step_holds_only_once_its_lower_bound_reaches_the_target():
    alpha = BUDGET.alpha
    need = requests_to_hold(90.0, alpha)
    assert need == 72  # alpha = 0.05 / (8 x 4 x 3) = 0.00052; 0.9^72 < alpha < 0.9^71
    assert attainment_bounds(need, need, alpha)[0] >= 90.0 > attainment_bounds(need - 1, need - 1, alpha)[0]
    # 40 of 40 met: not yet shown (its lower bound is 83 %), nor refuted: one more look
    first = decide(10.0, [Look(40, 40, trends=[steady()])], 90.0, alpha, None)
    assert first.decision == UNDECIDED and first.bounds[0] < 90.0 <= first.bounds[1]
    assert "attainment in [" in first.reason and first.floor is None
    # 120 of 120 met: held, its floor the rate less the bound on the backlog's growth (0.05 req/s x t(8 df))
    held = decide(10.0, [Look(40, 40, trends=[steady()]), Look(80, 80, trends=[steady()])], 90.0, alpha, None)
    assert held.decision == HELD and 9.6 < held.floor < 9.8
    # ... but not without a backlog to test: too few requests for a trend
    assert decide(10.0, [Look(80, 80)], 90.0, alpha, None).decision == UNDECIDED
    # 20 of 40: the upper bound is below 90 %: failed at the first look (30 of 40 would not be: up to 93 %)
    assert decide(10.0, [Look(40, 30)], 90.0, alpha, None).decision == UNDECIDED
    failed = decide(10.0, [Look(40, 20)], 90.0, alpha, None)
    assert failed.decision == FAILED and failed.bounds[1] < 90.0 and failed.reason.startswith("attainment <=")
    # a step whose share sits at the target stays undecided at every look
    at_target = [Look(n, round(0.9 * n), trends=[steady()]) for n in (40, 80, 160, 320)]
    assert decide(10.0, at_target, 90.0, alpha, None).decision == UNDECIDED
    # a lag past the limit fails whatever the attainment; nothing measured fails
    assert decide(10.0, [Look(80, 80, lag_p99_ms=900.0)], 90.0, alpha, 500.0).decision == FAILED
    assert decide(10.0, [Look(0, 0)], 90.0, alpha, None).decision == FAILED


def test_the_bounds_are_clopper_pearsons():
    # beta quantiles by hand: x/n = 0/10, one-sided 97.5 %: upper 1 - 0.025^(1/10); 10/10: lower 0.025^(1/10)
    assert attainment_bounds(0, 10, 0.025) == pytest.approx((0.0, 100 * (1 - 0.025 ** 0.1)))
    assert attainment_bounds(10, 10, 0.025) == pytest.approx((100 * 0.025 ** 0.1, 100.0))
    low, high = attainment_bounds(45, 50, 0.025)
    assert 78.0 < low < 83.0 and 96.0 < high < 98.5  # the textbook 95 % interval of 45/50 is [78.2, 96.7]
    assert requests_to_hold(100.0, 0.01) == float("inf")


@pytest.mark.parametrize("capacity, saturation", [(7.3, 10.0), (2.0, 10.0), (9.99, 10.0), (0.9, 10.0)])
def test_bisection_brackets_the_capacity_with_extra_looks_only_where_undecided(capacity, saturation):
    search = CapacitySearch(saturation, 90.0, BUDGET)
    asked = run_search(search, sharp(capacity))
    rates = [rate for rate, look in asked if look == 0]
    assert rates[0] == saturation and len(rates) == len(set(rates)) <= BUDGET.steps
    for step in search.steps:  # a held step took two looks (120 requests), a failed one one (20 of 40 met)
        assert (step.decision, len(step.looks)) == ((HELD, 2) if step.rate <= capacity else (FAILED, 1))
    value, low, high = search.estimate
    assert low <= capacity < high and low > 0  # the true capacity lies in the interval
    held = max(s.rate for s in search.steps if s.decision == HELD)
    assert value == pytest.approx((held + high) / 2) and held - 0.3 < low < held
    assert high - held <= max(TOLERANCE * high, saturation / 2 ** (len(rates) - 1) + 0.01)  # halved each step
    entry = search.entry("s", "qa", "stream", SLO(e2e=1.0))
    assert (entry["capacity_rps"], entry["ci_low"], entry["ci_high"], entry["confidence"]) == (value, low, high, 0.95)
    assert entry["bracket"] == [held, high] and entry["saturation_rps"] == saturation
    assert [s["rate"] for s in entry["steps"]] == rates
    assert entry["budget"]["alpha"] == pytest.approx(BUDGET.alpha)
    assert interval_at(entry, 0.95) == (low, high)  # the report decides the same steps again


def test_an_undecided_step_counts_as_not_held_and_is_no_bound_of_the_interval():
    """Attainment exactly at the target from 9.5 to 10.5 req/s: those steps use every look and stay undecided."""
    def answer(rate, look, n):
        share = 1.0 if rate < 9.5 else 0.9 if rate <= 10.5 else 0.5
        return Look(n, round(share * n), trends=[steady()])

    search = CapacitySearch(16.0, 90.0, BUDGET)
    run_search(search, answer)
    by_rate = {s.rate: s for s in search.steps}
    undecided = [s for s in search.steps if s.decision == UNDECIDED]
    assert undecided and all(len(s.looks) == BUDGET.looks for s in undecided)
    value, low, high = search.estimate
    held = max(s.rate for s in search.steps if s.decision == HELD)
    assert all(s.rate > held for s in undecided)  # the bisection went below them
    assert high is None or all(s.rate < high for s in undecided)  # and they do not narrow the interval
    assert by_rate[16.0].decision == FAILED and low < 10.5 and held <= value <= min(s.rate for s in undecided)
    assert "undecided" in search.describe()


def test_a_server_that_holds_beyond_saturation_doubles_the_rate_and_says_no_rate_failed():
    search = CapacitySearch(4.0, 90.0, Budget(steps=3, looks=4))
    asked = run_search(search, sharp(100.0))
    assert [r for r, look in asked if look == 0] == [4.0, 8.0, 16.0]
    value, low, high = search.estimate
    assert (value, high) == (16.0, None) and 15.6 < low < 16.0 and "nothing failed" in search.describe()


def test_a_server_that_holds_nothing_has_no_capacity():
    search = CapacitySearch(4.0, 90.0, Budget(steps=4, looks=4))
    asked = run_search(search, sharp(0.0))
    assert asked == [(4.0, 0), (2.0, 0), (1.0, 0), (0.5, 0)]
    assert search.estimate == (None, 0.0, 0.5) and "none held" in search.describe()


def test_the_search_stops_when_rounding_leaves_no_new_rate():
    search = CapacitySearch(1.0, 90.0, Budget(steps=50, looks=4), tolerance=0.0)
    run_search(search, sharp(0.7))
    assert len(search.steps) < 50 and search.estimate[1] <= 0.7 < search.estimate[2]


def test_the_interval_covers_the_capacity_in_simulated_searches():
    """Binomial attainment falling linearly from 100 % at 8 req/s to 60 % at 12 (the 90 % target crossed at 9):
    over 300 seeded searches from saturations between 7 and 13 the 95 % interval holds the crossing at least 95 %
    of the time, and the value lies within 10 % of it in 90 %."""
    rng = np.random.default_rng(7)
    crossing = 9.0
    covered = close = 0
    for _ in range(300):
        saturation = 10.0 * rng.uniform(0.7, 1.3)

        def answer(rate, look, n):
            share = float(np.clip(1.0 - (rate / 10.0 - 0.8) / 0.4 * 0.4, 0.6, 1.0))
            return Look(n, int(rng.binomial(n, share)), trends=[steady(rng.normal(0.0, 0.05))])

        search = CapacitySearch(saturation, 90.0, BUDGET)
        run_search(search, answer)
        value, low, high = search.estimate
        covered += low <= crossing <= (high if high is not None else np.inf)
        close += value is not None and abs(value / crossing - 1) <= 0.10
    assert covered >= 0.95 * 300, covered
    assert close >= 0.9 * 300, close


# --------------------------------------------------------------------------- over-saturation


def queue_results(rate: float, slots: int, service_s: float, n: int, jitter_s: float = 0.0, seed: int = 0,
                  slo_s: float = 0.6) -> list[RequestResult]:
    """Constant arrivals at ``rate`` to ``slots`` FIFO servers of fixed ``service_s``: the raw log they give,
    each request meeting the SLO when it ended within ``slo_s`` of its intended start."""
    rng = np.random.default_rng(seed)
    free = np.zeros(slots)
    out = []
    for i in range(n):
        due = 1000.0 + i / rate
        sent = due + abs(rng.normal(0.0, jitter_s)) if jitter_s else due
        slot = int(np.argmin(free))
        begin = max(sent, free[slot])
        free[slot] = begin + service_s
        out.append(RequestResult(f"r{i}", "qa", "chat", "sync", start_time=sent, end_offset=free[slot] - sent,
                                 output_tokens=1, intended_start=due, slo_ok=free[slot] - due <= slo_s))
    return out


def test_a_rate_past_saturation_fails_on_its_growing_queue_even_when_its_attainment_holds():
    """4 slots of 200 ms hold 20 req/s. At 21 req/s the queue grows by one request a second: within 100 requests
    (4.8 s) every one still meets a generous SLO (e2e <= 600 ms: a queue of 8), yet the backlog's trend fails the
    step."""
    alpha = BUDGET.alpha
    over = queue_results(21.0, 4, 0.2, 100)
    assert all(r.slo_ok for r in over)  # attainment alone would pass it
    times, level = backlog(over)
    growth = trend("backlog", times, level)
    assert growth.growing(alpha) and growth.p_value < 1e-4 and growth.growth > 3
    failed = decide(21.0, [Look(100, 100, trends=[growth])], 90.0, alpha, None)
    assert failed.decision == FAILED and failed.reason.startswith("backlog grows by")
    # at 19 req/s the backlog settles at 19 x 0.2 = 3.8 requests in flight and does not grow
    under = queue_results(19.0, 4, 0.2, 100, jitter_s=0.003, seed=1)
    stable = trend("backlog", *backlog(under))
    assert not stable.growing(alpha) and abs(stable.growth) < 1
    held = decide(19.0, [Look(100, 100, trends=[stable]), Look(100, 100)], 90.0, alpha, None)
    assert held.decision == HELD and 17.5 < held.floor <= 19.0  # it kept up with at least the floor


def test_a_short_step_just_past_capacity_that_holds_has_a_floor_below_the_capacity():
    """At 20.7 req/s (3.5 % over 20) 40 requests build a queue of about one request: too little for the trend test,
    so the step can hold, but the bound on the backlog's growth puts its floor below the capacity."""
    alpha = BUDGET.alpha
    results = queue_results(20.7, 4, 0.2, 40)
    short = trend("backlog", *backlog(results))
    assert not short.growing(alpha)
    decision = decide(20.7, [Look(40, 40, trends=[short]), Look(40, 40, trends=[short])], 90.0, alpha, None)
    assert decision.decision == HELD and decision.floor < 20.0


def test_the_trend_test_rarely_fires_on_a_stationary_queue():
    """500 seeded stationary, autocorrelated backlogs (an AR(1) around 6 requests): the share flagged as growing
    at alpha = 1 % stays near 1 %; a queue growing by 4 requests over the step is flagged in nearly all."""
    rng = np.random.default_rng(3)
    times = np.arange(200) * 0.05
    flagged = caught = 0
    for _ in range(500):
        noise = np.zeros(200)
        for i in range(1, 200):
            noise[i] = 0.6 * noise[i - 1] + rng.normal(0.0, 1.0)
        flagged += trend("backlog", times, 6.0 + noise).growing(0.01)
        caught += trend("backlog", times, 6.0 + noise + 0.4 * times).growing(0.01)
    assert flagged <= 0.025 * 500, flagged
    assert caught >= 0.9 * 500, caught


def test_a_look_reads_the_backlog_from_the_raw_log(tmp_path):
    results = queue_results(21.0, 4, 0.2, 100)
    cell = Cell("s", "qa", "sync", 100, "s/capacity/qa_sync_r21", rate=21.0, phase="capacity")
    look = look_of(cell, results, summarize(results), tmp_path)
    assert (look.requests, look.met, look.prefix) == (100, 100, cell.prefix)
    assert [t.series for t in look.trends] == ["backlog"] and look.trends[0].growing(BUDGET.alpha)
    assert look_of(cell, [], None, tmp_path).requests == 0


def test_a_step_whose_cell_stopped_at_the_error_rate_fails_whatever_it_measured():
    search = CapacitySearch(10.0, 50.0, BUDGET)
    stopped = Cell("s", "qa", "stream", 8, "s/qa_stream_r10", rate=10.0, phase="capacity", status=ERROR_RATE,
                   error="stopped early: 7 of 20 requests failed (35.0 %), more than --max-error-rate 0.1")
    assert failed_because(stopped) == stopped.error and failed_because(Cell("s", "qa", "stream", 8, "p")) == ""
    step = search.add(Probe(10.0, 0), Look(20, 13, trends=[steady()]), failed_because(stopped))
    assert (step.decision, step.decided.reason) == (FAILED, stopped.error)  # 65 % met would not fail 50 % alone
    every = CapacitySearch(10.0, 50.0, BUDGET)  # the runner's loop: every cell stopped early
    steps = search_cells(every, lambda probe: stopped, lambda cell, result: result)
    next(steps)
    with pytest.raises(StopIteration):
        for _ in range(BUDGET.steps * BUDGET.looks):
            steps.send(Look(20, 13, trends=[steady()]))
    assert every.steps and all(s.decision == FAILED and len(s.looks) == 1 for s in every.steps)
    assert every.estimate[0] is None  # nothing held: no capacity
