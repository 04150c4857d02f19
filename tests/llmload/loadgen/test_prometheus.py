"""The /metrics collector over a live board: what a scrape says equals the board's figures."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmload.core.clienterror import ClockReading
from llmload.loadgen.histograms import EDGES
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.prometheus import LOCAL, LiveCollector, Scrape
from test_live import feed

pytestmark = pytest.mark.unit


def scrape(board: LiveBoard, run: str = "r1", users: int = 3) -> dict[str, list]:
    """Samples by name: ``[(labels, value), ...]``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(lambda: Scrape(run, board, users)))
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples, name: str, **labels) -> float:
    found = [v for got, v in samples[name] if all(got.get(k) == want for k, want in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def test_a_scrape_says_what_the_board_holds():
    board = LiveBoard(histograms=True)
    feed([board], 400, time.time())
    board.clock[""] = ClockReading(cpu_s=1.0, wall_s=4.0)
    for ms in (0.2, 0.3, 5.0):
        board.clock[""].add(ms / 1000)
    samples = scrape(board)
    for task, stats in board.tasks.items():
        summary = stats.summary()
        assert value(samples, "llmload_requests_total", run="r1", task=task) == stats.requests
        assert value(samples, "llmload_failures_total", task=task) == stats.failures
        assert value(samples, "llmload_output_tokens_total", task=task) == stats.tokens
        assert value(samples, "llmload_slo_met_total", task=task) == stats.slo_met
        assert value(samples, "llmload_slo_attainment_ratio", task=task) == pytest.approx(summary.slo_attainment / 100)
        assert value(samples, "llmload_goodput_requests_per_second", task=task) == pytest.approx(summary.goodput)
        for name in EDGES:
            histogram = board.histograms[task].metrics[name]
            if not histogram.count:
                continue
            buckets = [(labels["le"], v) for labels, v in samples[f"llmload_{name}_seconds_bucket"]
                       if labels["task"] == task]
            assert buckets == [(le, float(count)) for le, count in histogram.cumulative()], (task, name)
            assert value(samples, f"llmload_{name}_seconds_count", task=task) == histogram.count
            assert value(samples, f"llmload_{name}_seconds_sum", task=task) == pytest.approx(histogram.total)
        ok = stats.requests - stats.failures
        assert value(samples, "llmload_ttft_seconds_count", task=task) == ok
    assert value(samples, "llmload_client_error_bound_seconds", worker=LOCAL) == pytest.approx(0.005, rel=0.011)
    assert value(samples, "llmload_client_cpu_ratio", worker=LOCAL) == 0.25
    assert value(samples, "llmload_users", run="r1") == 3


def test_an_empty_board_and_a_run_without_slo_or_histograms_scrape_cleanly():
    assert scrape(LiveBoard()).keys() <= {"llmload_users"}
    board = LiveBoard()
    feed([board], 30, time.time())
    for stats in board.tasks.values():
        stats.slo_met = None
    samples = scrape(board)
    assert "llmload_slo_attainment_ratio" not in samples and "llmload_ttft_seconds_bucket" not in samples
    assert sum(v for _l, v in samples["llmload_requests_total"]) == sum(s.requests for s in board.tasks.values())


def test_each_worker_has_its_own_client_error_series():
    board = LiveBoard()
    for node, ms in (("w1", 1.0), ("w2", 7.0)):
        part = LiveBoard()
        part.clock[""] = ClockReading(cpu_s=0.5, wall_s=1.0)
        part.clock[""].add(ms / 1000)
        board.merge(part, node)
    samples = scrape(board)
    bounds = {labels["worker"]: v for labels, v in samples["llmload_client_error_bound_seconds"]}
    assert bounds == pytest.approx({"w1": 0.001, "w2": 0.007}, rel=0.011)
