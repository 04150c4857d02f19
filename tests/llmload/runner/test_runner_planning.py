"""The runner's planning, order, Locust command and progress estimate, on scripted inputs (no servers)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from llmload.core.cliargs import add_options, option_fields, to_argv
from llmload.core.metrics import SLO, RequestResult, summarize
from llmload.loadgen.options import LoadSettings
from llmload.core.points import Load, Point
from llmload.core.runfiles import Cell
from llmload.runner.cell import CellRunner, LoadOptions
from llmload.runner import matrix
from llmload.runner.cli import parse_args
from llmload.runner.matrix import Runner
from llmload.core.sequential import look_sizes
from llmload.runner.options import RunnerSettings
from llmload.runner.plan import Plan, cell_prefix, round_rate, sweep_rates
from llmload.runner.progress import Progress, cell_label, duration_text, figures
from llmload.runner.schedule import Job, Order

pytestmark = pytest.mark.unit


def test_sweep_rates_are_evenly_spaced_up_to_saturation():
    assert sweep_rates(12.0, 4) == [3.0, 6.0, 9.0, 12.0]
    assert sweep_rates(10.0, 3) == [3.333, 6.667, 10.0]
    assert sweep_rates(5.0, 1) == [5.0] and round_rate(1234.5678) == 1235.0


def test_plan_cells_prefixes_and_counts():
    args = parse_args(["--servers", "mock", "--tasks", "qa", "--modes", "stream", "--concurrency", "1,4",
                       "--rates", "2.5", "--repeat", "2", "--sweep", "3", "--find-capacity", "--slo", "e2e=500",
                       "--pool", "6", "--capacity-steps", "5"])
    plan = Plan.from_settings(args)
    cells = [plan.cell(point, k) for point in plan.points("mock", "qa", "stream") for k in range(plan.repeat)]
    assert [c.prefix for c in cells] == ["mock/qa_stream_c1_rep1", "mock/qa_stream_c1_rep2", "mock/qa_stream_c4_rep1",
                                         "mock/qa_stream_c4_rep2", "mock/qa_stream_r2.5_rep1",
                                         "mock/qa_stream_r2.5_rep2"]
    assert [(c.concurrency, c.rate, c.repeat) for c in cells[-2:]] == [(6, 2.5, 0), (6, 2.5, 1)]
    saturation = plan.saturation_cell("mock", "qa", "stream")
    assert (saturation.prefix, saturation.concurrency, saturation.rate, saturation.phase) == (
        "mock/sweep/qa_stream_c6", 6, None, "sweep")
    # a capacity search runs at most 5 steps of 5 looks (the default --capacity-looks)
    assert plan.search_cells() == 1 + 3 * 2 + 5 * 5 and plan.cells_per_server() == 6 + 32
    assert cell_prefix(Point("s", "chat", "sync", Load(4, 3.0), "capacity")) == "s/capacity/chat_sync_r3"
    look = plan.step_cell("s", "chat", "sync", 3.0, look=2, requests=96)
    assert (look.prefix, look.repeat, look.requests, look.concurrency) == ("s/capacity/chat_sync_r3_look3", 2, 96, 6)
    assert look_sizes(48, 5, 0, 90.0, 0.01) == [48, 96, 192, 384, 768]  # 44 requests, all met, show 90 %
    assert look_sizes(16, 3, 2, 90.0, 0.01)[0] == 44 + 2  # a first look too small to hold is raised: 44 measured + 2 warm-up
    # with --target-ci a level may repeat up to --max-repeats, so its files carry _rep even from the first
    ci = Plan.from_settings(parse_args(["--servers", "mock", "--concurrency", "2", "--target-ci", "10"]))
    assert (ci.repeat, ci.max_repeats) == (1, 5)
    assert ci.cell(ci.points("mock", "qa", "stream")[0]).prefix == "mock/qa_stream_c2_rep1"


def test_locust_command_of_closed_and_open_cells(tmp_path):
    options = LoadOptions(api="chat", requests=10, max_tokens=6, warmup=2, arrival="gamma", burstiness=0.5, seed=7,
                          slo=SLO(ttft=0.5, e2e=4.0), cell_timeout=60.0)
    runner = CellRunner(tmp_path, options, {"qa": tmp_path / "qa.jsonl"})
    closed = runner.command(Cell("s", "qa", "stream", 12, "s/qa_stream_c12"), "http://127.0.0.1:1")
    assert closed[closed.index("-u") + 1] == "12" and closed[closed.index("--requests") + 1] == "12"
    assert "--rate" not in closed and closed[closed.index("--warmup") + 1] == "2"
    assert closed[closed.index("--slo") + 1] == "ttft=500,e2e=4000"  # judged by the load generator
    assert closed[closed.index("--max-tokens") + 1] == "6" and "--ignore-eos" in closed
    open_ = runner.command(Cell("s", "qa", "sync", 3, "s/qa_sync_r2.5", rate=2.5), "http://127.0.0.1:1")
    assert open_[open_.index("-u") + 1] == "3" and open_[open_.index("--requests") + 1] == "10"
    assert [open_[open_.index(f) + 1] for f in ("--rate", "--arrival", "--burstiness", "--seed")] == [
        "2.5", "gamma", "0.5", "7"]
    without_slo = CellRunner(tmp_path, replace(options, slo=None), {"qa": tmp_path / "qa.jsonl"})
    assert "--slo" not in without_slo.command(Cell("s", "qa", "stream", 1, "p"), "http://h")
    assert "--cancel-rate" not in closed
    cancelling = CellRunner(tmp_path, replace(options, cancel_rate=0.3, cancel_after="ttft+1s"),
                            {"qa": tmp_path / "qa.jsonl"})
    cmd = cancelling.command(Cell("s", "qa", "stream", 2, "p"), "http://h")
    assert [cmd[cmd.index(f) + 1] for f in ("--cancel-rate", "--cancel-after", "--seed")] == ["0.3", "ttft+1s", "7"]


def test_time_left_counts_cells_and_server_start_ups():
    progress = Progress(total_cells=10, starts=2)
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
    progress.expect_starts(0)
    for _ in range(4):
        progress.cell_done(None)
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
    assert cell_label(Cell("s", "qa", "sync", 4, "p", phase="capacity")) == "s qa sync c=4 (saturation)"
    step = Cell("s", "qa", "sync", 4, "p", rate=2.0, repeat=1, phase="capacity")
    assert cell_label(step, repeats=3) == "s qa sync rate=2/s pool=4 (capacity, look 2)"
    throughput = figures(Cell("s", "qa", "sync", 1, "p", status="ok"), summarize(results), throughput_only=True)
    assert "req/s" in throughput and "E2E" not in throughput
    failed = Cell("s", "qa", "sync", 1, "p", status="failed", error="all 2 requests failed: boom", wall_s=3)
    assert figures(failed, None) == "FAILED: all 2 requests failed: boom (3s)"
    results[0].cancelled, results[0].success, results[0].cancel_after = True, False, "0.5s"
    assert figures(cell, summarize(results)).startswith("8 req, 0 failed, 1 cancelled, E2E p50 800 ms")


def jobs_of(servers: dict[str, int]) -> list[Job]:
    """``n`` one-cell jobs per server, at concurrency 1..n (each job's first cell taken)."""
    def one(server: str, i: int):
        yield Cell(server, "qa", "stream", i + 1, f"{server}/{i}")

    jobs = [Job(server, one(server, i), 1) for server, n in servers.items() for i in range(n)]
    for job in jobs:
        job.start()
    return jobs


def test_interleaved_blocks_are_seeded_permutations_of_every_job():
    jobs = jobs_of({"a": 4, "b": 4, "c": 4})
    order = Order("interleaved", seed=5)
    first, second = order.block(jobs, 1), order.block(jobs, 2)
    assert sorted(map(id, first)) == sorted(map(id, jobs)) == sorted(map(id, second))  # every job once
    assert first == Order("interleaved", seed=5).block(jobs, 1)  # the seed and the block number fix it
    assert first != second and first != Order("interleaved", seed=6).block(jobs, 1)
    servers = "".join(job.server for job in first)
    assert any(servers[i] != servers[i + 1] for i in range(len(servers) - 1)) and servers != "aaaabbbbcccc"
    # each point's three servers run back to back, in an order drawn per point
    for block in (first, second):
        points = [job.pending.concurrency for job in block]
        assert all(len(set(points[i:i + 3])) == 1 for i in range(0, 12, 3)), points
        assert sorted(job.server for job in block[:3]) == ["a", "b", "c"]
    assert len({"".join(job.server for job in block[i:i + 3]) for block in (first, second)
                for i in range(0, 12, 3)}) > 1


def test_grouped_blocks_keep_each_servers_cells_together_and_sequential_runs_one_job_at_a_time():
    jobs = jobs_of({"a": 3, "b": 3, "c": 3})
    for number in range(1, 6):
        servers = "".join(job.server for job in Order("interleaved", 1, grouped=True).block(jobs, number))
        assert sorted(servers) == list("aaabbbccc")
        assert sum(servers[i] != servers[i + 1] for i in range(8)) == 2  # three runs: one start per server
    assert Order("sequential").block(jobs, 1) == jobs[:1]
    assert "seed 1" in Order("interleaved", 1).describe() and "sequential" in Order("sequential").describe()


@pytest.mark.parametrize("widths, repeats, converged", [
    ([{"output_token_throughput": 0.4}, {"output_token_throughput": 0.2}], 3, True),  # narrow enough at 3
    ([{"output_token_throughput": 0.1}], 2, True),  # at the fewest repeats
    ([{"output_token_throughput": 0.4}, {"output_token_throughput": None}, {"output_token_throughput": 0.3}],
     4, False),  # still too wide at the cap
])
def test_target_ci_stops_a_level_once_converged_or_at_its_cap(monkeypatch, tmp_path, widths, repeats, converged):
    args = parse_args(["--servers", "mock", "--modes", "sync", "--concurrency", "2", "--target-ci", "25",
                       "--max-repeats", "4", "--out", str(tmp_path)])
    runner = Runner(args)
    script = iter(widths)
    monkeypatch.setattr(matrix, "half_widths", lambda run_dir, cells: next(script))
    point = runner.plan.points("mock", "qa", "sync")[0]
    steps = runner.level_steps(point)
    ran = [next(steps)]
    with pytest.raises(StopIteration):
        while True:
            ran[-1].status = "ok"
            ran.append(steps.send(None))
    assert [c.repeat for c in ran] == list(range(repeats))
    (outcome,) = runner.convergence
    assert (outcome["repeats"], outcome["converged"], outcome["half_widths"]) == (repeats, converged, widths[-1])


@pytest.mark.unit
def test_a_trace_level_runs_once_per_server_and_mode_under_the_first_task():
    args = RunnerSettings(tasks=["qa", "chat"], modes=["stream", "sync"], concurrency=[2], repeat=1, pool=16,
                          trace=Path("t.jsonl"))
    plan = Plan.from_settings(args)
    cells = [plan.cell(p) for task, mode in plan.pairs() for p in plan.points("mock", task, mode)]
    traced = [c for c in cells if c.phase == "trace"]
    assert [(c.task, c.mode, c.prefix, c.point.label) for c in traced] == [
        ("qa", "stream", "mock/trace/qa_stream_c16", "mock qa stream c16 trace"),
        ("qa", "sync", "mock/trace/qa_sync_c16", "mock qa sync c16 trace")]
    assert cell_label(traced[0]) == "mock qa stream trace pool=16"
    assert plan.cells_per_server() == len(cells) == 6 and plan.needs_datasets
    assert not Plan.from_settings(replace(args, concurrency=[])).needs_datasets


@pytest.mark.unit
def test_a_trace_cell_runs_the_trace_not_the_prompt_set(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 9, "output_length": 2}\n')
    args = parse_args(["--servers", "mock", "--trace", str(trace), "--time-scale", "2", "--pool", "5"])
    runner = CellRunner(tmp_path, matrix.load_options(args), {})
    plan = Plan.from_settings(args)
    cmd = runner.command(plan.cell(plan.points("mock", "synthetic", "stream")[0]), "http://127.0.0.1:1")
    assert cmd[cmd.index("--trace") + 1] == str(trace.resolve()) and cmd[cmd.index("--time-scale") + 1] == "2"
    assert cmd[cmd.index("-u") + 1] == "5" and cmd[cmd.index("--max-model-len") + 1] == "2048"
    assert not {"--requests", "--dataset", "--max-tokens", "--rate", "--tokenizer"} & set(cmd)


@pytest.mark.unit
def test_a_cells_locust_command_says_its_load_settings_as_the_load_generator_reads_them(tmp_path):
    """The load generator's half of every cell's command, read back by its own declarations, is the LoadSettings the
    cell gives: closed, open, cancelling, SLO-judged and trace cells, each passing the load generator's checks."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 9, "output_length": 2}\n')
    reader = argparse.ArgumentParser()
    add_options(reader, LoadSettings, names=[f.name for f in option_fields(LoadSettings)])
    for argv in (["--concurrency", "3", "--max-tokens", "0"],
                 ["--rates", "2.5", "--arrival", "gamma", "--burstiness", "0.5", "--seed", "7", "--warmup", "1",
                  "--slo", "ttft=500,e2e=4s"],
                 ["--concurrency", "2", "--cancel-rate", "0.3", "--cancel-after", "ttft+1s", "--api", "completion"],
                 ["--concurrency", "2", "--retry", "3", "--retry-max-wait", "4", "--max-error-rate", "0"],
                 ["--trace", str(trace), "--time-scale", "2", "--pool", "5", "--seed", "3"]):
        args = parse_args(["--servers", "mock", "--tasks", "qa", *argv])
        runner = CellRunner(tmp_path, matrix.load_options(args), {"qa": tmp_path / "qa.jsonl"})
        plan = Plan.from_settings(args)
        for cell in (plan.cell(p) for task, mode in plan.pairs() for p in plan.points("mock", task, mode)):
            cmd = runner.command(cell, "http://127.0.0.1:1")
            given = runner.given(cell)
            ours = cmd[cmd.index("--stop-timeout") + 2:]
            assert ours == to_argv(LoadSettings(**given), list(given)), argv
            read = LoadSettings.from_options(reader.parse_args(ours))
            assert read == LoadSettings(**given) and read.mode == cell.mode, argv
            read.check()  # no contradiction the load generator would refuse
