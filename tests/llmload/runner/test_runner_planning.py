"""The runner's planning, capacity search and progress estimate, on scripted inputs (no servers)."""

from __future__ import annotations

import pytest

from llmload.core.metrics import SLO, RequestResult, summarize
from llmload.core.runfiles import Cell
from llmload.runner.capacity import TOLERANCE, CapacitySearch, Step, search
from llmload.runner.cell import CellRunner, LoadOptions, slo_argument, with_slo
from llmload.runner.cli import parse_args
from llmload.runner.plan import Plan, cell_prefix, round_rate, sweep_rates
from llmload.runner.progress import Progress, cell_label, duration_text, figures


def scripted(capacity: float, calls: list[float]):
    """A probe whose rates hold up to ``capacity`` (attainment 100 %) and fail above it (50 %)."""
    def probe(rate: float) -> Step:
        calls.append(rate)
        held = rate <= capacity
        return Step(rate, 100.0 if held else 50.0, rate, 1.0, f"s/capacity/qa_stream_r{rate:g}", held)
    return probe


@pytest.mark.parametrize("capacity, saturation", [(7.3, 10.0), (2.0, 10.0), (9.99, 10.0), (0.9, 10.0)])
def test_bisection_brackets_the_capacity_within_its_bounded_steps(capacity, saturation):
    calls: list[float] = []
    state = search(saturation, scripted(capacity, calls), max_steps=8)
    low, high = state.bracket
    assert 1 <= len(calls) <= 8 and len(calls) == len(set(calls))  # bounded, never the same rate twice
    assert calls[0] == saturation
    assert low <= capacity < high  # the true capacity lies in the bracket
    assert state.capacity == low and low > 0
    assert high - low <= max(TOLERANCE * high, saturation / 2 ** (len(calls) - 1) + 0.01)  # halved each step
    entry = state.entry("s", "qa", "stream", SLO(e2e=1.0), 99.0)
    assert entry["capacity_rps"] == low and entry["bracket"] == [low, high] and entry["saturation_rps"] == saturation
    assert [s["rate"] for s in entry["steps"]] == calls
    assert set(entry["steps"][0]) == {"rate", "attainment", "goodput", "lag_p99_ms", "prefix"}
    assert entry["slo"] == {"e2e": 1000.0} and entry["slo_target"] == 99.0


def test_a_server_that_holds_beyond_saturation_doubles_the_rate_and_says_no_rate_failed():
    calls: list[float] = []
    state = search(4.0, scripted(100.0, calls), max_steps=3)
    assert calls == [4.0, 8.0, 16.0] and state.bracket == [16.0, None] and state.capacity == 16.0


def test_a_server_that_holds_nothing_has_no_capacity():
    calls: list[float] = []
    state = search(4.0, scripted(0.0, calls), max_steps=4)
    assert calls == [4.0, 2.0, 1.0, 0.5] and state.capacity is None and state.bracket == [0.0, 0.5]
    assert "none held" in state.describe()


def test_a_step_holds_on_attainment_and_lag():
    def summary(ok: int, lag: float | None):
        results = [RequestResult(f"r{i}", "qa", "chat", "stream", start_time=100.0 + i, end_offset=0.1,
                                 token_offsets=[0.05, 0.1], output_tokens=2, slo_ok=i < ok,
                                 intended_start=None if lag is None else 100.0 + i - lag) for i in range(10)]
        return summarize(results)

    assert Step.measured(2.0, "p", summary(10, 0.01), 99.0, 0.5).held
    assert not Step.measured(2.0, "p", summary(9, 0.01), 99.0, 0.5).held  # 90 % < 99 %
    assert Step.measured(2.0, "p", summary(9, 0.01), 90.0, 0.5).held
    lagging = Step.measured(2.0, "p", summary(10, 0.8), 99.0, 0.5)
    assert not lagging.held and lagging.lag_p99_ms == pytest.approx(800.0)  # the schedule slipped
    assert not Step.measured(2.0, "p", None, 99.0, 0.5).held  # nothing measured


def test_the_search_stops_when_rounding_leaves_no_new_rate():
    state = CapacitySearch(saturation=1.0, max_steps=50, tolerance=0.0)
    while (rate := state.next_rate()) is not None:
        state.add(Step(rate, 0.0, 0.0, None, "p", held=rate <= 0.7))
    assert len(state.steps) < 50 and state.low <= 0.7 < state.high


def test_sweep_rates_are_evenly_spaced_up_to_saturation():
    assert sweep_rates(12.0, 4) == [3.0, 6.0, 9.0, 12.0]
    assert sweep_rates(10.0, 3) == [3.333, 6.667, 10.0]
    assert sweep_rates(5.0, 1) == [5.0] and round_rate(1234.5678) == 1235.0


def test_plan_cells_prefixes_and_counts():
    args = parse_args(["--servers", "mock", "--tasks", "qa", "--modes", "stream", "--concurrency", "1,4",
                       "--rates", "2.5", "--repeat", "2", "--sweep", "3", "--find-capacity", "--slo", "e2e=500",
                       "--pool", "6", "--capacity-steps", "5"])
    plan = Plan.from_args(args)
    cells = plan.fixed_cells("mock", "qa", "stream")
    assert [c.prefix for c in cells] == ["mock/qa_stream_c1_rep1", "mock/qa_stream_c1_rep2", "mock/qa_stream_c4_rep1",
                                         "mock/qa_stream_c4_rep2", "mock/qa_stream_r2.5_rep1",
                                         "mock/qa_stream_r2.5_rep2"]
    assert [(c.concurrency, c.rate, c.repeat) for c in cells[-2:]] == [(6, 2.5, 0), (6, 2.5, 1)]
    saturation = plan.saturation_cell("mock", "qa", "stream")
    assert (saturation.prefix, saturation.concurrency, saturation.rate, saturation.phase) == (
        "mock/sweep/qa_stream_c6", 6, None, "sweep")
    assert plan.search_cells() == 1 + 3 * 2 + 5 and plan.cells_per_server() == 6 + 12
    assert cell_prefix("s", "chat", "sync", 4, rate=3.0, phase="capacity") == "s/capacity/chat_sync_r3"


def test_locust_command_of_closed_and_open_cells(tmp_path):
    options = LoadOptions(api="chat", requests=10, max_tokens=6, warmup=2, arrival="gamma", burstiness=0.5, seed=7,
                          slo=SLO(ttft=0.5, e2e=4.0), cell_timeout=60.0)
    runner = CellRunner(tmp_path, options, {"qa": tmp_path / "qa.jsonl"}, flags=frozenset({"--slo"}))
    closed = runner.command(Cell("s", "qa", "stream", 12, "s/qa_stream_c12"), "http://127.0.0.1:1")
    assert closed[closed.index("-u") + 1] == "12" and closed[closed.index("--requests") + 1] == "12"
    assert "--rate" not in closed and closed[closed.index("--warmup") + 1] == "2"
    assert closed[closed.index("--slo") + 1] == "ttft=500,e2e=4000" == slo_argument(options.slo)
    assert closed[closed.index("--max-tokens") + 1] == "6" and "--ignore-eos" in closed
    open_ = runner.command(Cell("s", "qa", "sync", 3, "s/qa_sync_r2.5", rate=2.5), "http://127.0.0.1:1")
    assert open_[open_.index("-u") + 1] == "3" and open_[open_.index("--requests") + 1] == "10"
    assert [open_[open_.index(f) + 1] for f in ("--rate", "--arrival", "--burstiness", "--seed")] == [
        "2.5", "gamma", "0.5", "7"]
    without_slo = CellRunner(tmp_path, options, {"qa": tmp_path / "qa.jsonl"}, flags=frozenset())
    assert "--slo" not in without_slo.command(Cell("s", "qa", "stream", 1, "p"), "http://h")


def test_the_runner_applies_the_slo_where_the_load_generator_did_not():
    results = [RequestResult("a", "qa", "chat", "stream", 1.0, 0.3, token_offsets=[0.1, 0.3], output_tokens=2),
               RequestResult("b", "qa", "chat", "stream", 1.0, 0.9, token_offsets=[0.6, 0.9], output_tokens=2),
               RequestResult("c", "qa", "chat", "stream", 1.0, 0.9, token_offsets=[0.6], output_tokens=1,
                             slo_ok=True)]
    with_slo(results, SLO(ttft=0.5))
    assert [r.slo_ok for r in results] == [True, False, True]
    assert summarize(results).slo_attainment == pytest.approx(200 / 3)


def test_time_left_counts_cells_and_server_start_ups():
    progress = Progress(total_cells=10, servers=2)
    assert progress.counter() == "[1/10]" and progress.time_left() is None
    progress.server_started(30.0)
    for seconds in (4.0, 6.0):
        progress.cell_done(seconds)
    # mean cell 5 s x 8 cells left + mean start-up 30 s x 1 server to start
    assert progress.time_left() == pytest.approx(5.0 * 8 + 30.0) and progress.left_text() == "about 70 s left"
    progress.cell_done(None)  # a skipped cell counts as done, not in the mean
    assert progress.counter() == "[4/10]" and progress.time_left() == pytest.approx(5.0 * 7 + 30.0)
    progress.shrink(3)  # a capacity search that ended early
    assert progress.total == 7 and progress.time_left() == pytest.approx(5.0 * 4 + 30.0)
    progress.server_skipped(4)
    assert progress.done == 7 and progress.left_text() == "done"
    assert [duration_text(s) for s in (40, 14 * 60, 2 * 3600 + 300)] == ["40 s", "14 min", "2 h 05 min"]


def test_progress_lines_name_the_cell_and_its_figures():
    results = [RequestResult(f"r{i}", "qa", "chat", "stream", 100.0 + i * 0.5, 0.8, token_offsets=[0.1, 0.8],
                             output_tokens=8, slo_ok=True, intended_start=100.0 + i * 0.5 - 0.003)
               for i in range(8)]
    cell = Cell("basic-batched", "qa", "stream", 8, "p", rate=2.0, status="ok", wall_s=9.2)
    line = figures(cell, summarize(results))
    assert line.startswith("8 req, 0 failed, E2E p50 800 ms, TTFT p50 100 ms, ")
    assert "tok/s, SLO met 100.0 %, lag p99 3 ms (9s)" in line
    assert cell_label(cell) == "basic-batched qa stream rate=2/s pool=8"
    assert cell_label(Cell("s", "qa", "sync", 4, "p", repeat=1), repeats=3) == "s qa sync c=4 #2"
    assert cell_label(Cell("s", "qa", "sync", 4, "p", phase="sweep")) == "s qa sync c=4 (saturation)"
    throughput = figures(Cell("s", "qa", "sync", 1, "p", status="ok"), summarize(results), throughput_only=True)
    assert "req/s" in throughput and "E2E" not in throughput
    failed = Cell("s", "qa", "sync", 1, "p", status="failed", error="all 2 requests failed: boom", wall_s=3)
    assert figures(failed, None) == "FAILED: all 2 requests failed: boom (3s)"
