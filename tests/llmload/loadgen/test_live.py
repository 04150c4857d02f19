"""The live board merges: boards fed parts of a run, carried over the wire and merged, equal one board fed it all."""

import time

import msgpack
import pytest

from llmload.core.metrics import LiveStats, RequestResult, request_metrics
from llmload.loadgen.live import KEEP_S, LiveBoard

pytestmark = pytest.mark.unit


def result(i: int, start: float, task: str = "chat", success: bool = True, **kw) -> RequestResult:
    offsets = [0.05 + 0.01 * (i % 7) + 0.02 * k for k in range(6)]
    return RequestResult(request_id=str(i), task=task, api="chat", mode="stream", start_time=start,
                         end_offset=offsets[-1], token_offsets=offsets if success else [], output_tokens=6,
                         output_tokens_source="usage", success=success, error="" if success else "boom",
                         intended_start=start - 0.001 * (i % 5), slo_ok=i % 4 != 0, **kw)


def over_the_wire(board: LiveBoard) -> LiveBoard:
    """As Locust carries it: msgpack (bytes stay bytes)."""
    return LiveBoard.from_wire(msgpack.unpackb(msgpack.packb(board.to_wire()), raw=False))


def feed(boards: list[LiveBoard], count: int, now: float) -> None:
    for i in range(count):
        r = result(i, now - 8.0 + 7.5 * i / count, "chat" if i % 3 else "qa", success=i % 11 != 0,
                   warmup=i < 5)
        boards[i % len(boards)].add(r, request_metrics(r))


def test_merged_boards_equal_one_board_fed_everything():
    now = time.time()
    whole, parts = LiveBoard(), [LiveBoard(), LiveBoard(), LiveBoard()]
    feed([whole], 900, now)
    feed(parts, 900, now)
    fed = time.time()
    merged = LiveBoard()
    for node, part in enumerate(parts):
        merged.merge(over_the_wire(part), f"w{node}")
    # counts exact; sketches merge bin by bin, so quantiles are equal; means differ by the order of the sums only
    for task, summary in whole.summaries().items():
        got, want = merged.summaries()[task].flat(), summary.flat()
        assert {k for k, v in got.items() if v is None} == {k for k, v in want.items() if v is None}
        assert {k: v for k, v in got.items() if v is not None} == pytest.approx(
            {k: v for k, v in want.items() if v is not None}, rel=1e-12), task
    assert merged.window(now) == whole.window(now)
    assert (merged.counts.late, merged.counts.successes) == (whole.counts.late, 900 - 82)  # warm-up included
    # the clock when a board counted its first failure: the earliest of the parts' (no bound on the time between)
    assert merged.counts.first_failure == min(part.counts.first_failure for part in parts)
    assert now <= whole.counts.first_failure <= merged.counts.first_failure <= fed


def test_live_stats_survive_the_wire():
    stats = LiveStats()
    for i in range(200):
        r = result(i, 1000.0 + i)
        stats.add(r, request_metrics(r))
    again = LiveStats.from_wire(msgpack.unpackb(msgpack.packb(stats.to_wire()), raw=False))
    assert again.summary() == stats.summary()
    assert LiveStats.from_wire(LiveStats().to_wire()).summary() == LiveStats().summary()  # an empty delta too


def test_a_masters_window_ends_where_its_workers_last_reported():
    now = time.time()
    board = LiveBoard()
    feed([board], 300, now)
    board.complete_until = now - 4.0
    assert board.window()["time"] == round(now - 4.0, 3)
    board.history.append({"time": now - 7.0})
    points = board.snapshot(users=3)
    assert [round(p["time"] - (now - 4.0), 2) for p in points] == [-2.0, -1.0, 0.0]  # one point a second
    assert all(p["users"] == 3 for p in points) and board.snapshot(users=3) == []  # nothing new: no point


def test_buckets_far_behind_are_dropped_on_merge():
    now = time.time()
    old, board = LiveBoard(), LiveBoard()
    r = result(1, now - KEEP_S - 20)
    old.add(r, request_metrics(r))
    board.merge(over_the_wire(old), "w")
    assert board.total().requests == 1 and board.window(now)["requests_per_s"] == 0


def test_reachability_is_a_gauge_per_worker_and_the_board_reports_the_longest():
    now = time.time()
    down = RequestResult("d", "chat", "chat", "stream", now - 10.0, 0.0, success=False, flags=["unreachable"])
    up = RequestResult("u", "chat", "chat", "stream", now - 4.0, 1.0)
    a, b = LiveBoard(), LiveBoard()
    a.add(down, request_metrics(down))
    a.add(up, request_metrics(up))  # a saw 7 s of outage
    b.add(down, request_metrics(down))  # b still sees it
    merged = LiveBoard()
    merged.merge(over_the_wire(a), "a")
    merged.merge(over_the_wire(b), "b")
    assert merged.unreachable_so_far() == pytest.approx(10.0, abs=0.5)  # b's open outage, up to now
    later = LiveBoard()
    later.reach[""] = a.reach[""]
    merged.merge(over_the_wire(later), "b")  # b's next report: its outage closed (7 s)
    assert merged.unreachable_so_far() == pytest.approx(7.0, abs=0.01)


def test_the_window_averages_the_latencys_parts_and_merges_them_over_the_wire():
    # the server's parts: queue 10 + (i % 3) ms, prefill 40 ms, decode 100 ms; a request it did not time has none
    now = time.time()
    whole, parts = LiveBoard(), [LiveBoard(), LiveBoard()]
    for i in range(60):
        timing = None if i % 10 == 0 else {"queue_time_ms": 10.0 + i % 3, "time_to_first_token_ms": 40.0,
                                           "generation_time_ms": 100.0}
        r = result(i, now - 6.0 + 0.05 * i, server_timing=timing)
        for board in (whole, parts[i % 2]):
            board.add(r, request_metrics(r))
    merged = LiveBoard()
    for node, part in enumerate(parts):
        merged.merge(over_the_wire(part), f"w{node}")
    found = whole.parts(now)
    assert found["counts"]["queue"] == 54 and found["counts"]["prefill"] == 54
    timed = [i for i in range(60) if i % 10]
    assert found["parts_ms"]["queue"] == pytest.approx(sum(10.0 + i % 3 for i in timed) / 54, abs=0.01)
    assert found["parts_ms"]["prefill"] == pytest.approx(40.0) and found["parts_ms"]["decode"] == pytest.approx(100.0)
    ttfts = [0.05 + 0.01 * (i % 7) for i in timed]
    residual = sum(t * 1000.0 - (10.0 + i % 3) - 40.0 for t, i in zip(ttfts, timed)) / 54
    assert found["parts_ms"]["ttft_residual"] == pytest.approx(residual, abs=0.01)  # negative here: kept
    assert "frontend" not in found["parts_ms"] and "e2e_residual" not in found["parts_ms"]
    assert merged.parts(now) == found
    assert LiveBoard().parts(now) == {"parts_ms": {}, "counts": {}}
