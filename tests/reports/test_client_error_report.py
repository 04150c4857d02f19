"""The report shows each cell's client-error bound (from its _summary.json) and flags it past 5 % of the cell's exact
TTFT p50 or ITL mean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.merge import build_report, merge_run
from reports.run import load_run
from report_helpers import ScriptedRun, closed_loop, read_csv

pytestmark = pytest.mark.unit


def stated(cell, run: ScriptedRun, bound_ms: float | None) -> None:
    """The load generator's ``_summary.json`` of ``cell``, with a client-error block when ``bound_ms`` is given."""
    block = None if bound_ms is None else {"bound_ms": bound_ms, "basis": "p99", "samples": 900, "cpu_pct": 40.0}
    cell.files(run.path).summary.write_text(json.dumps({"summary": {}, "client_error": block}))


def test_cells_carry_their_bound_and_the_flags_and_repeats_the_worst(tmp_path):
    run = ScriptedRun(tmp_path / "run")
    rng = np.random.default_rng(5)
    # TTFT about 100 ms, ITL 10 ms: 5 % is 5 ms and 0.5 ms
    quiet = run.add("basic", "qa", "stream", 1, closed_loop(0.1 * rng.uniform(0.95, 1.05, 40)))
    stated(quiet, run, 0.3)
    busy = run.add("basic", "qa", "stream", 4, closed_loop(0.1 * rng.uniform(0.95, 1.05, 40), 4))
    stated(busy, run, 6.0)
    for repeat, bound in ((0, 0.2), (1, 0.8)):  # the group of repeats takes its worst
        stated(run.add("vllm", "qa", "stream", 1, closed_loop(0.1 * rng.uniform(0.95, 1.05, 40)), repeat=repeat),
               run, bound)
    older = run.add("vllm", "qa", "stream", 4, closed_loop(0.1 * rng.uniform(0.95, 1.05, 40), 4))
    stated(older, run, None)  # a summary without a bound (an older load generator): nothing said
    report = build_report(load_run(run.path))
    rows = {(r.point.server, r.point.load.concurrency, r.repeat): r.record() for r in report.rows}
    assert rows[("basic", 1, 0)]["client_error_ms"] == 0.3 and rows[("basic", 1, 0)]["client_error_flags"] is None
    assert rows[("basic", 4, 0)]["client_error_flags"] == "ttft,itl"
    assert rows[("vllm", 1, 1)]["client_error_flags"] == "itl"  # 0.8 ms > 0.5 ms, < 5 ms
    assert "client_error_ms" not in rows[("vllm", 4, 0)]
    groups = {(g.point.server, g.point.load.concurrency): g.record() for g in report.groups}
    assert groups[("vllm", 1)]["client_error_ms"] == 0.8 and groups[("vllm", 1)]["client_error_flags"] == "itl"
    warnings = [w for w in report.warnings if "client's timing error" in w]
    assert len(warnings) == 2 and any("basic qa stream c4" in w and "TTFT p50" in w for w in warnings)
    md = merge_run(run.path, tmp_path / "report").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| server"))
    assert "client error ms" in header and "6.00 ! ttft,itl" in md
    csv_rows = read_csv(tmp_path / "report" / "summary.csv")
    assert {r["client_error_flags"] for r in csv_rows} == {"", "ttft,itl", "itl"}


def test_a_run_without_summaries_has_no_client_error_column(tmp_path):
    run = ScriptedRun(tmp_path / "run")
    run.add("basic", "qa", "stream", 1, closed_loop(np.full(20, 0.1)))
    md = merge_run(run.path, tmp_path / "report").read_text()
    assert "client error" not in md
