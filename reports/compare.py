"""Compare two runs cell by cell: per figure A, B and B/A with its 95 % interval and significance.

    python -m reports.compare RUN_A RUN_B [--out DIR] [--calibration FILE | --no-calibration]
                                                          # default DIR: RUN_B/compare/

A run is a run folder or a saved ``report.json``. Each side is read from its typed
report where one is current (:func:`reports.report.saved_report`: a folder's own
``report/report.json`` made of its files as they are, with the calibration this
comparison uses): its points with their estimates and intervals, its capacity
searches. Otherwise its rows are computed from the raw logs, as the report does.
A ratio that needs the requests themselves (the paired bootstrap: fewer than 2
repeats on a side) reads them from the run's raw logs, the folder a report.json
names; without them that is one ``error:`` line.

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

from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.calibration import Calibration
from llmload.core.cliargs import OneLineParser
from llmload.core.stats import WITHIN_RUN
from llmload.core.tables import render
from llmload.core.points import Point
from reports.calibrate import add_calibration_options, applicable, find_calibration
from reports.estimates import Requests, requests_of
from reports.format import estimate_text, ratio_text, title
from reports.report import Report, current, saved_report
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


@dataclass
class Side:
    """One run as the comparison reads it: the path given, its run.json, its points (repeats pooled) with their
    estimates, its capacity searches; ``report``: the typed report they come from (None: from the raw logs)."""

    path: Path
    manifest: dict
    report: Report | None = None
    run: RunData | None = None
    groups: list[Row] = field(default_factory=list)
    capacity: list[dict] = field(default_factory=list)

    def folder(self) -> Path:
        """The run folder: the one given, or the one a report.json was made of."""
        return Path(self.report.run.path) if self.path.is_file() else self.path

    def has_raw(self) -> bool:
        """Whether the run's raw logs are at hand: its folder is there, as its report was made of it."""
        folder = self.folder()
        return self.run is not None or folder.is_dir() and (self.report is None or current(self.report, folder))

    def raw(self) -> RunData:
        """The run's raw logs (read once); :class:`ReportError` where a report.json's folder is gone or changed."""
        if self.run is None:
            if not self.has_raw():
                raise ReportError(f"{self.path}: its intervals were made with another calibration than this "
                                  f"comparison's, and its run folder {self.folder()} is not there as it was made of: "
                                  "compare with the same --calibration, or the run folders")
            self.run = load_run(self.folder())
        return self.run

    def requests(self, point: Point) -> Requests:
        """The measured requests of a point's completed repeats, as its row was made of them."""
        ok = [c for c in self.raw().groups().get(point, []) if c.ok and c.summary is not None]
        return requests_of(ok)


class RawRequests:
    """A saved row's requests, read from the run's raw logs when a ratio first needs them."""

    def __init__(self, side: Side, point: Point):
        self.side, self.point, self.found = side, point, None

    def statistics(self, by: str = "request"):
        if self.found is None:
            self.found = self.side.requests(self.point)
        return self.found.statistics(by)


def typed_report(source: Path) -> Report | None:
    """The typed report of ``source``: a report.json (loaded: :class:`ReportError` if it cannot be), or a run
    folder's own current one (None: none, stale, or of another format version)."""
    return Report.load(source) if source.is_file() else saved_report(source)


def same_calibration(one: Calibration | None, other: Calibration | None) -> bool:
    return (one is None) == (other is None) and (one is None or one.to_json() == other.to_json())


def read_sides(run_a: Path, run_b: Path, calibration: Calibration | None) -> tuple[Side, Side, Calibration | None,
                                                                                  str]:
    """Both sides with their rows made with the calibration that applies to both runs, and its line: from the
    typed reports where they were made with it, else from the raw logs."""
    sides = []
    for source in (Path(run_a), Path(run_b)):
        report = typed_report(source)
        if report is not None:
            sides.append(Side(source, report.run.manifest, report))
        else:
            run = load_run(source)
            sides.append(Side(source, run.manifest, run=run, capacity=run.capacity))
    calibration, note = applicable(calibration, sides)
    for side in sides:
        if side.report is not None and same_calibration(side.report.calibration, calibration):
            side.groups, side.capacity = side.report.groups, side.report.run.capacity
            for row in side.groups:
                if row.ok and side.has_raw():
                    row.estimates.requests = RawRequests(side, row.point)
        else:
            _, side.groups = run_rows(side.raw(), calibration)
            side.capacity = side.raw().capacity
    return sides[0], sides[1], calibration, note


def compare(a: Side, b: Side, calibration: Calibration | None, note: str) -> dict:
    """Rows of the comparison, the capacity rows, the cells left out (with why), and the calibration and its line
    (used where measured on both runs' machine)."""
    groups_a, groups_b = a.groups, b.groups
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
    for side in (a, b):
        if not side.has_raw():
            left_out.append(f"figures whose B/A pairs requests (single runs, or a percentile with too few values in "
                            f"a repeat): {side.path} has no raw logs at hand (its run folder {side.folder()} is not "
                            "there as it was made of)")
    return {"rows": rows, "capacity": capacity, "left_out": sorted(set(left_out)), "calibration": calibration,
            "calibration_note": note}


def markdown(a: Side, b: Side, result: dict, plot: Path | None) -> str:
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
    """Compare two runs (folders or report.json files); write the table, CSV and plot into ``out_dir`` (default:
    run B's folder, or the folder of its report.json, ``/compare``); return the Markdown."""
    from reports.plots import compare_plot  # matplotlib: only when drawing

    a, b, used, note = read_sides(run_a, run_b, find_calibration(calibration, use_calibration))
    result = compare(a, b, used, note)
    out = Path(out_dir) if out_dir else (b.path.parent if b.path.is_file() else b.path) / "compare"
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "compare.csv", result["rows"] + result["capacity"], COLUMNS)
    plot = compare_plot(result["rows"] + result["capacity"], out / "compare_ratios.png")
    path = out / "compare.md"
    path.write_text(markdown(a, b, result, plot))
    return path


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m reports.compare",
                                description="Compare two runs cell by cell (same server, task, mode and "
                                            "level; capacity results where both have them): B/A per figure with "
                                            "its 95 % interval and whether it is significant. A run is a run "
                                            "folder or its saved report.json.")
    p.add_argument("run_a", type=Path, help="the first run folder, or its report.json (A)")
    p.add_argument("run_b", type=Path, help="the second run folder, or its report.json (B)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: RUN_B/compare; for a report.json, compare/ beside it)")
    add_calibration_options(p)
    args = p.parse_args(argv)
    return report_command(lambda: compare_runs(args.run_a, args.run_b, args.out, args.calibration,
                                               not args.no_calibration))


if __name__ == "__main__":
    raise SystemExit(main())
