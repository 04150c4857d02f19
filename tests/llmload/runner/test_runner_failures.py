"""A cell over --max-error-rate, through the runner: Locust stops it early, the runner marks it error-rate (its
figures kept), and the report's failures section shows it (a scripted server answers 503 to a third)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from llmload.core.rawlog import read_results
from llmload.core.runfiles import ERROR_RATE, read_cells
from llmload.core.services import ServiceProcess, free_port, local_url
from prompt_sets import make_data
from runner_helpers import run_runner

pytestmark = pytest.mark.integration

FAULT_SERVER = Path(__file__).resolve().parents[1] / "core" / "fault_server.py"


def test_a_cell_over_the_error_rate_stops_early_and_is_marked(tmp_path):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    port = free_port()
    server = ServiceProcess("fault", [sys.executable, str(FAULT_SERVER), "--port", str(port), "--models-id",
                                      "unavailable_third"], local_url(port, "/health"), tmp_path / "fault.log").start()
    try:
        server.wait_ready(60)
        proc = run_runner("--servers", f"flaky={local_url(port)}", "--tasks", "qa", "--modes", "stream",
                          "--concurrency", "2", "--requests", "60", "--max-tokens", "4", "--max-error-rate", "0.1",
                          "--data-dir", str(data), "--out", str(run_dir), "--repeat", "1")
    finally:
        server.stop()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]  # a measured outcome, not a broken run
    cell = read_cells(run_dir)[-1]
    assert cell.status == ERROR_RATE and cell.exit_code == 3, cell
    assert cell.error.startswith("stopped early: ") and "more than --max-error-rate 0.1" in cell.error
    assert "ERROR-RATE: stopped early" in out  # the progress line, with the cell's figures
    files = cell.files(run_dir)
    results = read_results(files.raw_log)
    assert 20 <= len(results) < 60  # judged from 20 requests; the raw log holds every one that ended
    assert sum(not r.success for r in results) == pytest.approx(len(results) / 3, abs=1)
    summary = json.loads(files.summary.read_text())
    assert summary["stopped_early"].endswith("more than --max-error-rate 0.1")
    assert summary["settings"]["max_error_rate"] == 0.1 and summary["settings"]["retry"] == 0

    report = run_dir / "report"
    saved = json.loads((report / "report.json").read_text())
    [row] = saved["failures"]
    assert row["status"] == ERROR_RATE and row["classes"]["server_error"] == row["failures"] > 0
    assert row["retried"] is None and row["failure_latency_p50"] < 0.05  # a 503 comes at once
    markdown = (report / "summary.md").read_text()
    assert "## Failures and retries" in markdown and f"| {ERROR_RATE} " in markdown
    assert "flaky qa stream c2: error-rate: stopped early" in markdown  # among the missing or failed cells
    assert 'id="failures-and-retries"' in (report / "report.html").read_text()
    assert (report / "failures.csv").read_text().splitlines()[0].startswith("server,task,mode,")
