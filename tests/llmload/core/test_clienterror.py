"""The client-error bound: its basis (p99, or the max of too few samples), worst process, flags, wire form."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.core.clienterror import (FLAG_SHARE, ClockReading, describe, figures_of, flags, summary_block, worst)
from llmload.core.metrics import RequestResult, summarize
from llmload.core.stats import min_samples

pytestmark = pytest.mark.unit


def reading(delays_ms, cpu_s: float = 1.0, wall_s: float = 4.0) -> ClockReading:
    found = ClockReading(cpu_s=cpu_s, wall_s=wall_s)
    for delay in delays_ms:
        found.add(delay / 1000.0)
    return found


def test_the_bound_is_the_p99_of_enough_samples_and_the_max_of_too_few():
    rng = np.random.default_rng(1)
    many = rng.exponential(1.0, 2000)  # ms
    r = reading(many)
    assert r.basis == "p99" and r.samples == 2000
    assert r.bound * 1000 == pytest.approx(np.percentile(many, 99), rel=0.03)  # a sketch: 1 % relative, plus rank
    few = many[: min_samples("p99") - 1]
    r = reading(few)
    assert r.basis == "max" and r.bound * 1000 == pytest.approx(few.max(), rel=0.011)
    assert reading([]).bound is None and reading([]).basis == "max"


def test_negative_delays_count_as_zero_and_cpu_share_is_cpu_over_wall():
    r = reading([-1.0, 0.0], cpu_s=1.0, wall_s=4.0)
    assert r.samples == 2 and r.bound == 0.0
    assert r.cpu_share == 0.25 and ClockReading().cpu_share is None


def test_wire_round_trip_keeps_every_figure():
    r = reading([0.1, 0.5, 2.0, 9.0], cpu_s=0.7, wall_s=3.0)
    back = ClockReading.from_wire(r.to_wire())
    assert back.samples == r.samples and back.bound == pytest.approx(r.bound) and back.cpu_s == 0.7
    assert ClockReading.from_wire(ClockReading().to_wire()).samples == 0


def test_the_worst_process_makes_the_run_bound():
    readings = {"w1": reading([1.0] * 400), "w2": reading([5.0] * 400), "w3": ClockReading()}
    name, found = worst(readings)
    assert name == "w2" and found.bound * 1000 == pytest.approx(5.0, rel=0.011)
    assert worst({"w3": ClockReading()}) is None


def test_flags_pass_five_percent_of_ttft_p50_or_itl_mean():
    figures = {"ttft_p50": 0.100, "itl_mean": 0.020}
    assert flags(0.0009, figures) == []
    assert flags(0.0011, figures) == ["itl"]  # 5 % of 20 ms is 1 ms
    assert flags(0.0051, figures) == ["ttft", "itl"]
    assert flags(0.0051, {"ttft_p50": None, "itl_mean": 0.0}) == []  # nothing to compare with
    assert flags(None, figures) == [] and FLAG_SHARE == 0.05


def stream_result(start: float, offsets: list[float]) -> RequestResult:
    return RequestResult("r", "chat", "chat", "stream", start, end_offset=offsets[-1], token_offsets=offsets,
                         output_tokens=len(offsets), output_tokens_source="usage")


def test_figures_are_ttft_p50_and_the_exact_itl_mean_where_the_summary_has_it():
    results = [stream_result(0.0, [0.1, 0.11, 0.12]), stream_result(1.0, [0.2, 0.23, 0.26, 0.29, 0.32])]
    exact = summarize(results)
    figures = figures_of(exact)
    assert figures["ttft_p50"] == exact.get("ttft", "p50")
    # the mean of every gap (2 x 10 ms, 4 x 30 ms), not the mean of each request's mean (20 ms)
    assert figures["itl_mean"] == pytest.approx((2 * 0.01 + 4 * 0.03) / 6)
    assert exact.get("tpot", "mean") == pytest.approx(0.02)


def test_summary_block_names_the_worst_worker_and_lists_each():
    readings = {"w1": reading([1.0] * 10), "w2": reading([8.0] * 10, cpu_s=3.8, wall_s=4.0)}
    block = summary_block(readings, {"ttft_p50": 0.1, "itl_mean": 0.02}, dispatch_lag_p99_s=0.002)
    assert block["worst_worker"] == "w2" and block["basis"] == "max" and block["samples"] == 10
    assert block["bound_ms"] == pytest.approx(8.0, rel=0.011) and block["flags"] == ["ttft", "itl"]
    assert block["saturated"] and block["cpu_pct"] == 95.0 and block["dispatch_lag_p99_ms"] == 2.0
    assert [w["worker"] for w in block["workers"]] == ["w1", "w2"]
    assert block["compared_with_ms"] == {"ttft_p50": 100.0, "itl_mean": 20.0}
    line = describe(block)
    assert line.startswith(", client error <= 8.0 ms (max of 10 loop samples, client CPU 95 %)")
    assert line.endswith("[over 5% of TTFT p50 and ITL mean]")
    standalone = summary_block({"": reading([0.5] * 10)}, {"ttft_p50": 0.1, "itl_mean": 0.02})
    assert "workers" not in standalone and standalone["flags"] == [] and standalone["worst_worker"] is None
    assert summary_block({}, {}) is None and describe(None) == ""
