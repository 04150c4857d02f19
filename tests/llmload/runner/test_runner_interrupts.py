"""SIGINT and SIGTERM to the runner or its process group: Locust stops first and gracefully, then the server."""

from __future__ import annotations

import signal
import time

import psutil
import pytest

from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_cells
from llmload.runner.interrupts import Interrupted, StopSignal
from monitors.sampler import peak_usage, read_monitor
from prompt_sets import make_data
from runner_helpers import (SIGNALS, cell_records, descendants, line_count, locust_count, send,
                            start_runner, stop_leftovers, wait_for)

#: 200 ms per token: a request of 6 tokens takes 1.2 s, so 20 requests at 2 users keep the cell going for 12 s.
SLOW_MOCK = ("--mock-ttft-ms", "200", "--mock-itl-ms", "200")


@pytest.mark.parametrize("name, group", [("SIGINT", False), ("SIGTERM", False), ("SIGINT", True),
                                         ("SIGTERM", True)], ids=["int-pid", "term-pid", "int-group", "term-group"])
@pytest.mark.integration
@pytest.mark.slow
def test_a_signal_during_a_cell_stops_locust_then_the_server(tmp_path, name, group):
    signum = SIGNALS[name]
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    raw_log = run_dir / "mock" / "qa_stream_c2_requests.jsonl"
    runner = start_runner("--servers", "mock", "--tasks", "qa", "--modes", "stream", "--concurrency", "2,4",
                          "--requests", "20", "--max-tokens", "6", "--data-dir", str(data), "--out", str(run_dir),
                          "--repeat", "1", *SLOW_MOCK)
    started: list = []
    try:
        # mid-cell: the cell is recorded as running and some requests have finished
        assert wait_for(lambda: line_count(raw_log) >= 3, timeout=90), runner.stderr.read() if runner.poll() else ""
        started = descendants(runner.pid)  # the server, Locust and the monitor
        assert len(started) >= 3
        sent_at = time.monotonic()
        send(runner.pid, signum, group)
        out, err = runner.communicate(timeout=90)
        stopped_in = time.monotonic() - sent_at
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        leftovers = stop_leftovers(started + descendants(runner.pid))
    assert runner.returncode == 128 + signum, out + err
    assert leftovers == [], "processes the runner started are still running"
    assert stopped_in < 30, stopped_in  # Locust lets its two in-flight requests end (1.2 s), then the server stops
    assert "Traceback" not in err and f"interrupted by {name}" in err, err
    # the interrupted cell is recorded as such, with its partial results; the next cell never started
    assert [r["status"] for r in cell_records(run_dir)] == ["running", "interrupted"]
    (cell,) = read_cells(run_dir)
    assert cell.status == "interrupted" and cell.error.startswith(f"stopped by {name} after ")
    # Locust's raw log holds every request that finished, each one whole; none was cut by the server stopping
    results = read_results(raw_log)
    assert 3 <= len(results) < 20
    assert all(r.success and r.output_tokens == 6 and len(r.token_offsets) == 6 for r in results), \
        [r.error for r in results]
    assert not any("refused" in r.error for r in results)
    assert locust_count(run_dir / "mock" / "qa_stream_c2_stats.csv") == len(results)
    # the monitor beside the cell scraped the server's /metrics: two requests running
    assert peak_usage(read_monitor(run_dir / "mock" / "qa_stream_c2_monitor.csv"))["peak_server_running"] == 2
    locust_log = (run_dir / "mock" / "qa_stream_c2_locust.log").read_text()
    assert "Traceback" not in locust_log and "refused" not in locust_log
    # a partial report is made from what was measured
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "interrupted" in summary
    assert f"[1/2] mock qa stream c=2: {len(results)} req, 0 failed" in out and "INTERRUPTED" in out


def runs(process: psutil.Process, text: str) -> bool:
    """Whether ``process`` (still there) has ``text`` in its command line."""
    try:
        return text in " ".join(process.cmdline())
    except psutil.Error:
        return False


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
@pytest.mark.integration
def test_a_signal_while_a_server_starts_stops_it_at_once(tmp_path, name):
    signum = SIGNALS[name]
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    runner = start_runner("--servers", "never-ready", "--tasks", "qa", "--modes", "stream", "--concurrency", "1",
                          "--data-dir", str(data), "--out", str(run_dir), "--start-timeout", "120", "--repeat", "1",
                          fakes=True)
    started: list = []
    try:
        # the never-ready server's process (not the runner's other children, e.g. the load generator's option list)
        assert wait_for(lambda: any(runs(p, "time.sleep(600)") for p in descendants(runner.pid)), timeout=60)
        time.sleep(1.0)  # the runner is now waiting for the health check
        started = descendants(runner.pid)
        sent_at = time.monotonic()
        send(runner.pid, signum, group=False)
        out, err = runner.communicate(timeout=60)
        stopped_in = time.monotonic() - sent_at
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        leftovers = stop_leftovers(started)
    assert runner.returncode == 128 + signum, out + err
    assert leftovers == [] and stopped_in < 15, (leftovers, stopped_in)
    assert "== never-ready: starting never-ready" in out and f"interrupted by {name}" in err
    assert "no cell had started" in err and "Traceback" not in err
    assert not (run_dir / "report").exists()


@pytest.mark.unit
def test_signals_are_restored_after_the_run():
    before = signal.getsignal(signal.SIGTERM)
    stop = StopSignal().install()
    with stop.deferred():
        stop.request(signal.SIGTERM)  # noted, not raised, inside a cell
    assert stop.requested and stop.count == 1
    with pytest.raises(Interrupted) as info:
        stop.check()
    assert info.value.exit_code == 143 and info.value.name == "SIGTERM"
    stop.check()  # raised once only: cleanup goes on undisturbed
    stop.uninstall()
    assert signal.getsignal(signal.SIGTERM) is before
