"""The runner end to end: real servers, real Locust, real monitor, real merge, on tiny matrices."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from llmload.core.metrics import request_metrics
from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_cells
from llmload.core.services import ServiceProcess, free_port, local_url
from llmload.runner.convergence import half_widths
from llmload.runner.matrix import Runner
from llmload.runner.options import build_parser, parse_settings
from llmload.targets import KINDS, register
from llmload.targets.basic import basic_server_command
from prompt_sets import make_data
from reports.explain import main as explain
from reports.report import saved_report
from runner_helpers import RenamedMock, read_summary, run_runner

PROGRESS = re.compile(r"^\[(\d+)/(\d+)\] (\S+) (\w+) (\w+) c=(\d+): (\d+) req, (\d+) failed, E2E p50 \d+ ms"
                      r"(, TTFT p50 \d+ ms)?, [\d.]+ tok/s \(\d+s\); (about \d+ (s|min) left|done)$")


@pytest.mark.integration
@pytest.mark.slow
def test_mock_matrix_end_to_end(tmp_path):
    data = make_data(tmp_path / "data", ("qa", "chat"))
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "mock", "--tasks", "qa,chat", "--modes", "sync,stream", "--concurrency", "1,3",
                      "--requests", "5", "--max-tokens", "6", "--repeat", "1", "--data-dir", str(data), "--out",
                      str(run_dir), "--mock-ttft-ms", "40", "--mock-itl-ms", "10", merged=True)
    assert proc.returncode == 0, proc.stdout
    # one whole line per cell, even where the monitor prints its no-GPU notice, with the count and the time left
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 8, proc.stdout
    matches = [PROGRESS.match(line) for line in progress]
    assert all(matches), progress
    assert [m.group(1) for m in matches] == [str(i) for i in range(1, 9)] and {m.group(2) for m in matches} == {"8"}
    assert progress[-1].startswith("[8/8] mock ") and progress[-1].endswith("done")
    assert all("left" in line for line in progress[:-1])
    info = json.loads((run_dir / "run.json").read_text())
    # one block (one repeat) of the 8 cells in a seeded random order, which run.json and the lines agree on
    order = info["order"]
    assert (order["kind"], order["seed"], order["grouped"]) == ("interleaved", 0, False)
    ran = [(c["order"], c["block"], c["prefix"], c["status"]) for c in order["cells"]]
    assert [r[:2] for r in ran] == [(i, 1) for i in range(1, 9)] and {r[3] for r in ran} == {"ok"}
    assert [f"mock/{m.group(4)}_{m.group(5)}_c{m.group(6)}" for m in matches] == [r[2] for r in ran]
    sequential = [f"mock/{t}_{m}_c{c}" for t in ("qa", "chat") for m in ("sync", "stream") for c in (1, 3)]
    assert sorted(r[2] for r in ran) == sorted(sequential) and [r[2] for r in ran] != sequential
    assert info["settings"]["requests"] == 5 and info["versions"]["locust"]
    assert info["baseline"] is None and info["servers"] == [{"name": "mock", "kind": "mock", "url": None,
                                                                 "prefix_caching": None}]
    # each cell is recorded when it starts and again when it ends
    records = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["running", "ok"] * 8
    cells = read_cells(run_dir)
    assert len(cells) == 8 and all(c.status == "ok" and c.phase == "matrix" and c.rate is None for c in cells)
    rows = read_summary(run_dir)
    assert len(rows) == 8
    for row, cell in zip(rows, cells):
        raw = read_results(run_dir / f"{cell.prefix}_requests.jsonl")
        assert cell.prefix == f"mock/{cell.task}_{cell.mode}_c{cell.concurrency}"
        assert len(raw) == int(row["requests"]) == int(row["locust_requests"])
        assert all(r.output_tokens == 6 for r in raw)  # fixed output length
        assert float(row["peak_server_rss_mib"]) > 10  # the monitor sampled the server tree
        e2e = float(row["e2e_p50"])
        assert 0.09 <= e2e < 0.25  # 40 ms + 5 x 10 ms on the mock's schedule
        if row["mode"] == "stream":
            assert 0.04 <= float(row["ttft_p50"]) < 0.12
        else:
            assert row["ttft_p50"] == ""
    assert (run_dir / "report" / "summary.md").stat().st_size > 0


@pytest.mark.integration
def test_a_registered_fake_kind_runs_a_cell_through_the_runner(tmp_path, capsys):
    """Adding a server kind is one TargetKind plus register(): the runner starts it like any other."""
    KINDS.pop(RenamedMock.name, None)
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--servers", "renamed-mock"])  # unknown until registered
    register(RenamedMock())
    try:
        data = make_data(tmp_path / "data")
        args = parse_settings([
            "--servers", "renamed-mock,twin=renamed-mock", "--baseline", "twin", "--tasks", "qa", "--modes",
            "stream", "--concurrency", "2", "--requests", "4", "--max-tokens", "5", "--mock-ttft-ms", "30",
            "--mock-itl-ms", "5", "--repeat", "1", "--data-dir", str(data), "--out", str(tmp_path / "run")], parser)
        code = Runner(args).run()
    finally:
        KINDS.pop(RenamedMock.name, None)
    out = capsys.readouterr().out
    assert code == 0, out
    cells = read_cells(tmp_path / "run")
    assert [(c.server, c.status) for c in cells] == [("renamed-mock", "ok"), ("twin", "ok")], out
    for cell in cells:
        raw = read_results(tmp_path / "run" / f"{cell.prefix}_requests.jsonl")
        assert len(raw) == 4 and all(r.success and len(r.token_offsets) == 5 for r in raw)
        assert (tmp_path / "run" / cell.server / "server.log").is_file()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["baseline"] == "twin"
    assert [s["kind"] for s in info["servers"]] == ["renamed-mock", "renamed-mock"]
    assert "[2/2] twin qa stream c=2: 4 req, 0 failed" in out


@pytest.mark.integration
def test_server_that_fails_to_start_is_recorded_and_reported(tmp_path):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    dead = local_url(free_port())
    proc = run_runner("--servers", f"mock,gone={dead}", "--tasks", "qa", "--modes", "stream", "--concurrency", "1",
                      "--requests", "2", "--max-tokens", "3", "--data-dir", str(data), "--out", str(run_dir),
                      "--mock-ttft-ms", "5", "--mock-itl-ms", "1", "--repeat", "1")
    assert proc.returncode == 0, proc.stderr
    assert "gone failed to start" in proc.stdout
    cells = {c.server: c for c in read_cells(run_dir)}
    assert cells["mock"].status == "ok"
    assert cells["gone"].status == "skipped" and "does not answer" in cells["gone"].error
    rows = {r["server"]: r for r in read_summary(run_dir)}
    assert rows["gone"]["status"] == "skipped"


@pytest.mark.integration
@pytest.mark.slow
def test_server_dying_mid_run_marks_the_rest_and_stop_on_error(tmp_path):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    port = free_port()
    server = ServiceProcess("mock", basic_server_command("mock", port, extra=["--mock-ttft-ms", "5",
                                                                            "--mock-itl-ms", "1"]),
                            local_url(port, "/health"), tmp_path / "mock.log").start()
    server.wait_ready(60)
    first = run_dir / "ext" / "qa_stream_c1_requests.jsonl"

    def kill_after_first_cell():
        deadline = time.monotonic() + 120
        while not (first.exists() and (run_dir / "ext" / "qa_stream_c2_monitor.csv").exists()) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        server.stop(grace=0)

    killer = threading.Thread(target=kill_after_first_cell)
    killer.start()
    try:
        proc = run_runner("--servers", f"ext={local_url(port)}", "--tasks", "qa", "--modes", "stream",
                          "--concurrency", "1,2,4", "--requests", "30", "--max-tokens", "20", "--data-dir", str(data),
                          "--out", str(run_dir), "--on-error", "stop", "--repeat", "1")
    finally:
        killer.join()
        server.stop()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cells = read_cells(run_dir)
    assert cells[0].status == "ok"
    assert any(c.status == "failed" for c in cells[1:]), cells
    assert len(cells) < 3 or cells[-1].status != "ok"


@pytest.mark.model
@pytest.mark.integration
@pytest.mark.slow
def test_basic_server_on_the_real_model(tmp_path, default_model, capsys):
    """The batched engine on the embedded model: every request carries the server's own timing, and the latency
    splits into consistent parts (docs/metrics.md), in the report and in llmload explain."""
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "batched", "--tasks", "qa", "--modes", "stream", "--parallel", "2",
                      "--requests", "2", "--max-tokens", "8", "--data-dir", str(data), "--out", str(run_dir),
                      "--repeat", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_summary(run_dir)
    assert row["status"] == "ok" and int(row["failures"]) == 0
    assert float(row["output_token_throughput"]) > 0
    assert float(row["peak_server_rss_mib"]) > 200  # the model's weights are in the server's memory
    raw = read_results(run_dir / "basic-batched" / "qa_stream_c2_requests.jsonl")
    assert [r.output_tokens for r in raw] == [8, 8]
    info = json.loads((run_dir / "run.json").read_text())
    assert info["served_model_name"] == "SmolLM2-135M-Instruct" and info["settings"]["concurrency"] == [2]
    # where the time goes: each request timed by the server, its parts inside what the client measured
    bound = json.loads((run_dir / "basic-batched" / "qa_stream_c2_summary.json").read_text())["client_error"]
    slack = (bound["bound_ms"] if bound else 0.0) / 1000.0
    for r in raw:
        m = request_metrics(r)
        assert None not in (m.frontend, m.queue, m.prefill, m.decode), r.server_timing
        assert m.frontend + m.queue + m.prefill <= m.ttft + slack and m.ttft_residual >= -slack, m
        assert m.prefill > 0 and m.decode > 0 and m.e2e == pytest.approx(m.ttft + m.decode + m.tail), m
        if len(r.token_offsets) == r.output_tokens:  # every token a chunk: the server's time within the client's
            # A first token delivered late (a busy machine) shortens the client's decode and makes the tail
            # negative by as much as it lengthens the TTFT's residual: bound their sum, the server's time from
            # arrival to its last token against the client's E2E (a last token without text ends it a token early).
            assert m.ttft_residual + m.tail >= -slack - 0.005, m
    (split,) = saved_report(run_dir).time_split
    assert (split.timed, split.requests, split.malformed) == (2, 2, 0) and split.frontend_known
    assert [p.name for p in split.parts] == ["ttft_residual", "frontend", "queue", "prefill", "decode", "tail"]
    assert "## Where the time goes" in (run_dir / "report" / "summary.md").read_text()
    assert explain([str(run_dir)]) == 0
    assert "basic-batched qa stream: TTFT = client/network" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.slow
def test_target_ci_repeats_each_level_until_its_headline_intervals_are_narrow(tmp_path):
    """--target-ci 25: every level runs 2 repeats at least and 3 at most, stopping once output tok/s and TTFT p50
    (over its repeats, as the report computes them) are within +-25 %; a level that stopped is in no later block."""
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "mock", "--tasks", "qa", "--modes", "stream", "--concurrency", "1,4",
                      "--requests", "12", "--max-tokens", "4", "--mock-ttft-ms", "30", "--mock-itl-ms", "5",
                      "--target-ci", "25", "--max-repeats", "3", "--data-dir", str(data), "--out", str(run_dir),
                      "--no-report", merged=True)
    assert proc.returncode == 0, proc.stdout
    info = json.loads((run_dir / "run.json").read_text())
    ci = info["target_ci"]
    assert (ci["pct"], ci["min_repeats"], ci["max_repeats"]) == (25.0, 2, 3)
    assert ci["headline"]["stream"] == ["output_token_throughput", "ttft_p50"]
    cells = read_cells(run_dir)
    for level in ci["levels"]:
        mine = sorted((c for c in cells if c.concurrency == level["concurrency"]), key=lambda c: c.repeat)
        assert len(mine) == level["repeats"] in (2, 3) and [c.block for c in mine] == [1, 2, 3][:len(mine)]
        widths = half_widths(run_dir, mine)
        assert widths == pytest.approx(level["half_widths"])  # the report's intervals of those repeats
        assert level["converged"] == all(w is not None and w <= 0.25 for w in widths.values())
        if level["repeats"] == 3:  # it did not converge after 2
            assert not all(w is not None and w <= 0.25 for w in half_widths(run_dir, mine[:2]).values())
        assert f"qa stream c={level['concurrency']}: {'converged' if level['converged'] else 'at its cap'}" \
               f" after {level['repeats']} repeats" in proc.stdout
    assert {c.prefix for c in cells} >= {"mock/qa_stream_c1_rep1", "mock/qa_stream_c1_rep2"}
    assert "x 2-3 repeats (until +-25 %)" in proc.stdout
