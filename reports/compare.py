"""Compare two run folders cell by cell: per figure A, B and B/A with its 95 % interval and significance.

    python -m reports.compare RUN_A RUN_B [--out DIR] [--calibration FILE | --no-calibration]
                                                          # default DIR: RUN_B/compare/

Cells match on server, task, mode and load level (repeats pooled) where both
runs completed them; capacity searches match on server, task and mode. The
ratio B/A of a figure comes with Welch's t over the repeats' figures where both
runs have 2 or more repeats, else a paired block bootstrap over the prompt
occurrences both runs sent (each run resampled on its own where they share
none), widened by the calibrated run-to-run variation of the cell on both sides
where a calibration of this machine has it; it is significant when its interval
excludes 1 and covers run-to-run variation. A capacity ratio's interval comes
from the two capacities' intervals, each at 97.5 % (so both hold together at
95 %; :func:`reports.sections.capacity_ratio`). Writes ``compare.md``, ``compare.csv`` and
``compare_ratios.png``.
"""

from __future__ import annotations

from pathlib import Path

from llmload.core.calibration import Calibration
from llmload.core.cliargs import OneLineParser
from llmload.core.stats import WITHIN_RUN
from llmload.core.tables import render
from reports.calibrate import add_calibration_options, applicable, find_calibration
from reports.format import estimate_text, ratio_text, title
from reports.rows import RATIO_COLUMNS, Ratio, Row, ratio_record, ratios_of, run_rows, write_csv
from reports.run import ReportError, RunData, load_run, report_command
from reports.sections import capacity_ratio, capacity_text, slo_text

COLUMNS = ["server", "task", "mode", "concurrency", "rate", "metric", "a", "b", "ratio", "ci_low", "ci_high",
           "covers", "significant", "pairs", "method"]


def matched(row: Row) -> tuple:
    """What a cell is matched on across runs: server, task, mode and load level (any phase)."""
    return (row.point.server, row.point.task, row.point.mode, row.point.load)


def describe_point(row: Row) -> str:
    """``mock qa stream c4`` (matched in any phase)."""
    p = row.point
    return f"{p.server} {p.task} {p.mode} {p.load.label}"


def holdings(groups: list[Row], capacity: list[dict]) -> str:
    """What a run completed, compactly: ``mock qa stream c1,c4; capacity: mock qa stream``."""
    by: dict[tuple, list[str]] = {}
    for row in groups:
        if row.ok:
            by.setdefault((row.point.server, row.point.task, row.point.mode), []).append(row.point.load.label)
    parts = [f"{' '.join(k)} {','.join(v)}" for k, v in by.items()]
    if capacity:
        parts.append("capacity: " + ", ".join(f"{c.get('server')} {c.get('task')} {c.get('mode')}" for c in capacity))
    return "; ".join(parts) or "no completed cell"


def capacity_key(entry: dict) -> tuple:
    return (entry.get("server"), entry.get("task"), entry.get("mode"))


def compare(a: RunData, b: RunData, calibration: Calibration | None = None) -> dict:
    """Rows of the comparison, the capacity rows, the cells left out (with why), and the calibration's line
    (used where measured on both runs' machine)."""
    calibration, note = applicable(calibration, [a, b])
    _, groups_a = run_rows(a, calibration)
    _, groups_b = run_rows(b, calibration)
    ok_a = {matched(r): r for r in groups_a if r.ok}
    ok_b = {matched(r): r for r in groups_b if r.ok}
    shared = [k for k in ok_a if k in ok_b]
    caps_a = {capacity_key(e): e for e in a.capacity}
    caps_b = {capacity_key(e): e for e in b.capacity}
    shared_caps = [k for k in caps_a if k in caps_b]
    if not shared and not shared_caps:
        raise ReportError(f"the runs share no completed cell (same server, task, mode and level) nor capacity "
                          f"result: A ({a.path}) holds {holdings(groups_a, a.capacity)}; "
                          f"B ({b.path}) holds {holdings(groups_b, b.capacity)}")
    rows = []
    for key in shared:
        ra, rb = ok_a[key], ok_b[key]
        seed = ("compare",) + rb.point.key[:5]  # server, task, mode, concurrency, rate
        for column, (value, iv, method) in ratios_of(rb, ra, RATIO_COLUMNS, seed, calibration).items():
            record = {**rb.point.record(), "metric": column, "a": ra.get(column), "b": rb.get(column),
                      "ratio": value, **ratio_record(iv, method)}
            rows.append(Ratio(column, value, iv, method, record, rb, ra))
    capacity = []
    for key in shared_caps:
        ea, eb = caps_a[key], caps_b[key]
        iv, method = capacity_ratio(eb, ea)
        record = {"server": key[0], "task": key[1], "mode": key[2], "concurrency": None, "rate": None,
                  "metric": "capacity_rps", "a": ea.get("capacity_rps"), "b": eb.get("capacity_rps"),
                  "ratio": iv.value, "ci_low": iv.low, "ci_high": iv.high, "significant": iv.significant,
                  "pairs": None, "method": method, "slo": slo_text(eb)}
        capacity.append(Ratio("capacity_rps", iv.value, iv, method, record, eb, ea))
    left_out = []
    for name, other_ok, groups in (("A", ok_b, groups_a), ("B", ok_a, groups_b)):
        for row in groups:
            key = matched(row)
            if key in shared:
                continue
            if not row.ok:
                left_out.append(f"{describe_point(row)}: {row.status} in {name}"
                                + (f" ({row.get('error')})" if row.get("error") else ""))
            elif key not in other_ok:
                left_out.append(f"{describe_point(row)}: only completed in {name}")
    return {"rows": rows, "capacity": capacity, "left_out": sorted(set(left_out)), "calibration": calibration,
            "calibration_note": note}


def markdown(a: RunData, b: RunData, result: dict, plot: Path | None) -> str:
    parts = ["# Comparison: B / A", "", f"- A: {a.path}", f"- B: {b.path}", "",
             "B/A of each figure with its 95 % interval: Welch's t over the repeats' figures where both runs have "
             "2 or more repeats, else a paired block bootstrap over the prompt occurrences both runs sent, widened "
             "by the cell's calibrated run-to-run variation on both sides; `covers` says which. Significant: the "
             "interval excludes 1 and covers run-to-run variation. Latencies in ms.", ""]
    if result["calibration"] is not None:
        parts += [f"Run-to-run variation: {result['calibration_note']}.", ""]
    else:
        parts += [f"Run-to-run variation: {result['calibration_note']}. Single-run ratios are therefore "
                  f"`{WITHIN_RUN}` and not judged significant: two runs of the same setup differ by more than one "
                  "run's interval shows (docs/statistics.md).", ""]
    body = []
    for r in result["rows"]:
        significant = r.interval.significant
        body.append([describe_point(r.top), title(r.metric), estimate_text(r.metric, r.bottom),
                     estimate_text(r.metric, r.top), ratio_text(r.interval), r.get("covers"),
                     None if significant is None else ("yes" if significant else "no")])
    if body:
        parts += [render(body, ["cell", "figure", "A", "B", "B / A [95 %]", "covers", "significant"]), ""]
    if result["capacity"]:
        parts += ["## Capacity at SLO", "",
                  "Each capacity with its interval; B / A with a 95 % interval from the two capacities' "
                  "intervals at 97.5 % each (`brackets`, with no confidence, for runs recorded before the "
                  "capacity had an interval).", "",
                  render([[f"{r.get('server')} {r.get('task')} {r.get('mode')}", r.get("slo"), capacity_text(r.bottom),
                           capacity_text(r.top), ratio_text(r.interval), r.method,
                           None if r.get("significant") is None else ("yes" if r.get("significant") else "no")]
                          for r in result["capacity"]],
                         ["server task mode", "SLO", "A req/s", "B req/s", "B / A", "interval", "significant"]), ""]
    if result["left_out"]:
        parts += ["## Not compared", ""] + [f"- {line}" for line in result["left_out"]] + [""]
    if plot:
        parts += [f"![{plot.stem}]({plot.name})", ""]
    return "\n".join(parts)


def compare_runs(run_a: str | Path, run_b: str | Path, out_dir: str | Path | None = None,
                 calibration: Path | None = None, use_calibration: bool = True) -> Path:
    """Compare two run folders; write the table, CSV and plot into ``out_dir``; return the Markdown."""
    from reports.plots import compare_plot  # matplotlib: only when drawing

    a, b = load_run(run_a), load_run(run_b)
    result = compare(a, b, find_calibration(calibration, use_calibration))
    out = Path(out_dir) if out_dir else b.path / "compare"
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "compare.csv", result["rows"] + result["capacity"], COLUMNS)
    plot = compare_plot(result["rows"] + result["capacity"], out / "compare_ratios.png")
    path = out / "compare.md"
    path.write_text(markdown(a, b, result, plot))
    return path


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m reports.compare",
                                description="Compare two run folders cell by cell (same server, task, mode and "
                                            "level; capacity results where both have them): B/A per figure with "
                                            "its 95 % interval and whether it is significant.")
    p.add_argument("run_a", type=Path, help="the first run folder (A)")
    p.add_argument("run_b", type=Path, help="the second run folder (B)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_B/compare)")
    add_calibration_options(p)
    args = p.parse_args(argv)
    return report_command(lambda: compare_runs(args.run_a, args.run_b, args.out, args.calibration,
                                               not args.no_calibration))


if __name__ == "__main__":
    raise SystemExit(main())
