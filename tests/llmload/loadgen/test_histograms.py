"""Fixed-edge histograms and the probe's gauge on the live board: counted where measured, merged on a master."""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest

from llmload.core.clienterror import ClockReading
from llmload.core.metrics import request_metrics, summarize
from llmload.loadgen.histograms import EDGES, VECTOR_FROM, Histogram, TaskHistograms
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.sink import ResultSink
from test_live import feed, result

pytestmark = pytest.mark.unit


def over_the_wire(board: LiveBoard) -> LiveBoard:
    return LiveBoard.from_wire(msgpack.unpackb(msgpack.packb(board.to_wire()), raw=False))


def test_edges_are_increasing_and_buckets_are_upper_inclusive_as_prometheus_le():
    for name, edges in EDGES.items():
        assert list(edges) == sorted(set(edges)) and edges[0] > 0, name
    h = Histogram((0.1, 0.2))
    for value in (0.05, 0.1, 0.15, 0.2, 0.25):
        h.add(value)
    assert h.counts == [2, 2, 1] and h.cumulative() == [("0.1", 2), ("0.2", 4), ("+Inf", 5)]
    assert h.total == pytest.approx(0.75)


def test_the_vector_path_counts_as_the_one_by_one_path():
    rng = np.random.default_rng(3)
    gaps = tuple(rng.lognormal(np.log(0.02), 1.0, VECTOR_FROM * 5)) + EDGES["itl"][:5]  # values on edges too
    one, many = Histogram(EDGES["itl"]), Histogram(EDGES["itl"])
    for gap in gaps:
        one.add(gap)
    many.add_many(gaps, np.asarray(EDGES["itl"]))
    assert many.counts == one.counts and many.total == pytest.approx(one.total)


def test_merged_histograms_equal_one_board_fed_everything_and_match_the_exact_counts():
    now = time.time()
    whole, parts = LiveBoard(histograms=True), [LiveBoard(histograms=True) for _ in range(3)]
    feed([whole], 600, now)
    feed(parts, 600, now)
    merged = LiveBoard()  # a master keeps what its workers counted whatever its own setting
    for node, part in enumerate(parts):
        merged.merge(over_the_wire(part), f"w{node}")
    assert set(merged.histograms) == set(whole.histograms) == {"chat", "qa"}
    for task, mine in whole.histograms.items():
        for name, histogram in mine.metrics.items():
            assert merged.histograms[task].metrics[name].counts == histogram.counts, (task, name)
    # against the exact values of the same results
    results = [result(i, now - 8.0 + 7.5 * i / 600, "chat" if i % 3 else "qa", success=i % 11 != 0, warmup=i < 5)
               for i in range(600)]
    chat = [r for r in results if r.task == "chat" and r.success and not r.warmup]
    for name in ("ttft", "e2e", "itl"):
        values = np.concatenate([np.atleast_1d(np.asarray(getattr(request_metrics(r), name), float)) for r in chat])
        want = [int(np.sum(values <= edge)) for edge in EDGES[name]] + [len(values)]
        assert [count for _le, count in whole.histograms["chat"].metrics[name].cumulative()] == want, name
    exact = summarize(chat)
    itl = whole.histograms["chat"].metrics["itl"]
    assert itl.total / itl.count == pytest.approx(exact.get("itl", "mean"), rel=1e-9)


def test_histograms_stay_off_unless_asked_and_the_sink_keeps_the_setting_across_cuts():
    plain = LiveBoard()
    feed([plain], 50, time.time())
    assert plain.histograms == {} and "histograms" not in plain.to_wire()
    sink = ResultSink(None, None, delta=True, histograms=True)
    for i in range(10):
        sink.collect(result(i, time.time()))
    first = sink.cut(taken=10, users=1)
    sink.collect(result(11, time.time()))
    second = sink.cut(taken=11, users=1)
    assert sum(first.board["histograms"]["chat"]["ttft"]["counts"]) == 10
    assert sum(second.board["histograms"]["chat"]["ttft"]["counts"]) == 1  # a delta, histograms still on
    assert TaskHistograms.from_wire(second.board["histograms"]["chat"]).metrics["e2e"].count == 1


def test_each_workers_probe_is_a_gauge_the_master_keeps_the_latest_of():
    sink = ResultSink(None, None, delta=True)
    probe = sink.board.clock[""] = ClockReading()
    probe.add(0.002)
    first = sink.cut(taken=0, users=1)
    probe.add(0.009)  # the same reading goes on after the cut
    second = sink.cut(taken=0, users=1)
    master = LiveBoard()
    master.merge(LiveBoard.from_wire(first.board), "w1")
    master.merge(LiveBoard.from_wire(second.board), "w1")
    master.merge(LiveBoard.from_wire(first.board), "w1", latest=False)  # an older report arriving late
    assert master.clock["w1"].samples == 2 and master.clock["w1"].bound == pytest.approx(0.009, rel=0.011)
    other = LiveBoard()
    other.clock[""] = ClockReading()
    other.clock[""].add(0.030)
    master.merge(over_the_wire(other), "w2")
    block = master.client_error()
    assert block["worst_worker"] == "w2" and [w["worker"] for w in block["workers"]] == ["w1", "w2"]
