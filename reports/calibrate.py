"""Measure the run-to-run variation of each kind of cell from run folders with repeats: the calibration file.

    python -m reports.calibrate RUN_DIR [RUN_DIR ...] [--out FILE]   # default FILE: results/calibration.json

For every cell with 2 or more completed repeats (``--repeat R``) and every figure
each repeat has an interval for, the spread between the repeats' figures on the
log scale, less the mean squared within-run standard error (a method-of-moments
random-effects estimate), is the run-to-run variance the within-run interval does
not show; it is kept per cell and pooled per server and mode. The run folders
must come from one machine (run.json's ``machine``); the file records it. Merging
and comparing then widen single-run intervals by it (``--calibration FILE``,
``LLMLOAD_CALIBRATION``; ``docs/statistics.md``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from pathlib import Path

import numpy as np

from llmload.core.calibration import (DEFAULT_PATH, ENV, Calibration, CalibrationError, Spread, default_path,
                                      describe_machine, machine_id)
from llmload.core.cliargs import OneLineParser
from llmload.core.points import Point
from llmload.core.stats import Z975
from reports.estimates import cell_intervals, requests_of
from reports.run import ReportError, RunData, load_run, report_command

Components = tuple[float, float, int]  # (between-repeat variance, mean within-run variance, repeats) of log figures


def components(per_repeat: list) -> Components | None:
    """Between-repeat variance of the log figures and mean within-run variance (from each 95 % interval's log
    width), or None unless every repeat has a positive figure with an interval."""
    if len(per_repeat) < 2 or any(iv is None or not iv.has_interval or iv.value is None or iv.value <= 0
                                  or iv.low <= 0 for iv in per_repeat):
        return None
    logs = np.log([iv.value for iv in per_repeat])
    within = np.array([(math.log(iv.high) - math.log(iv.low)) / (2 * Z975) for iv in per_repeat]) ** 2
    return float(logs.var(ddof=1)), float(within.mean()), len(per_repeat)


def spread_of(parts: list[Components]) -> Spread:
    """The pooled run-to-run spread ``sqrt(max(0, sum df (between - within) / sum df))`` and within-run error
    ``sqrt(sum df within / sum df)``, df = repeats - 1."""
    df = sum(r - 1 for _, _, r in parts)
    excess = sum((r - 1) * (between - within) for between, within, r in parts) / df
    within = sum((r - 1) * within for _, within, r in parts) / df
    return Spread(math.sqrt(max(0.0, excess)), float(df), math.sqrt(within), len(parts))


def cell_components(cells: list) -> dict[str, Components]:
    """Per figure, the components of one cell's repeats (the within-run intervals its report shows)."""
    per_repeat = [cell_intervals(requests_of([c]), c.cell.key + (c.cell.phase,)) for c in cells]
    out = {}
    for column in per_repeat[0]:
        found = components([ivs.get(column) for ivs in per_repeat])
        if found:
            out[column] = found
    return out


def measure(runs: list[RunData]) -> Calibration:
    """The calibration of ``runs`` (one machine): spreads per cell kind and figure, and pooled per server and
    mode; :class:`ReportError` when the runs come from several machines or hold no repeats."""
    machines = {str(machine_id(r.manifest.get("machine"))) for r in runs}
    if len(machines) > 1:
        raise ReportError("the run folders come from different machines ("
                          + "; ".join(sorted({describe_machine(r.manifest.get('machine')) for r in runs}))
                          + "): calibrate each machine on its own")
    if machine_id(runs[0].manifest.get("machine"))["cpu"] is None:
        raise ReportError(f"{runs[0].path}: run.json does not say which machine the run measured")
    exact: dict[tuple, dict[str, list[Components]]] = {}
    pooled: dict[tuple, dict[str, list[Components]]] = {}
    for run in runs:
        for key, cells in run.groups().items():
            ok = [c for c in cells if c.ok and c.summary is not None]
            if len(ok) < 2:
                continue
            server, task, mode, level = key.server, key.task, key.mode, key.load.tag
            for column, parts in cell_components(ok).items():
                for table, kind in ((exact, (server, task, mode, level)), (exact, (server, task, mode, None)),
                                    (pooled, (server, None, mode, None))):
                    table.setdefault(kind, {}).setdefault(column, []).append(parts)
    if not exact:
        raise ReportError("no cell has 2 or more completed repeats: calibrate from runs made with --repeat R "
                          "(R >= 2; 8 or more give a usable spread)")
    spreads = {kind: {column: spread_of(parts) for column, parts in figures.items()}
               for table in (exact, pooled) for kind, figures in table.items()}
    return Calibration(machine=runs[0].manifest["machine"], spreads=spreads,
                       created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       sources=[str(r.path) for r in runs])


# --------------------------------------------------------------------------- using a calibration


def find_calibration(path: Path | None = None, use: bool = True) -> Calibration | None:
    """The calibration a report uses: ``path``, else ``LLMLOAD_CALIBRATION``, else the default file if it exists;
    None with ``use`` False. A named file that is missing or malformed, or a malformed default one, is a
    :class:`ReportError`."""
    if not use:
        return None
    if path is None:
        path, named = default_path()
        if path is None or (not named and not path.is_file()):
            return None
    try:
        return Calibration.load(path)
    except CalibrationError as exc:
        raise ReportError(str(exc)) from None


def applicable(calibration: Calibration | None, runs: list[RunData]) -> tuple[Calibration | None, str]:
    """The calibration if it was measured on the machine of every run, and the one line the report says of it."""
    if calibration is None:
        return None, ("no calibration of this machine's run-to-run variation (make one with "
                      "`python -m reports.calibrate RUN_DIR` on a run made with `--repeat 8`)")
    for run in runs:
        machine = run.manifest.get("machine")
        if not calibration.same_machine(machine):
            return None, (f"the calibration {calibration.path} was measured on another machine "
                          f"({describe_machine(calibration.machine)}; {run.path.name}: "
                          f"{describe_machine(machine)}) and is not used")
    return calibration, (f"calibration {calibration.path} (this machine, {calibration.created or 'undated'}, "
                         f"from {len(calibration.sources)} run folder(s))")


def spreads_for(calibration: Calibration | None, point: Point) -> dict[str, Spread] | None:
    """A load point's calibrated spreads per figure (None without an applicable calibration)."""
    if calibration is None:
        return None
    return calibration.for_cell(point.server, point.task, point.mode, point.load.tag)


def add_calibration_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                       help=f"run-to-run calibration that widens single-run intervals (default: ${ENV}, 'none' for "
                            f"none, else {DEFAULT_PATH} when it exists; made by python -m reports.calibrate)")
    group.add_argument("--no-calibration", action="store_true",
                       help="use no calibration: single-run intervals cover within-run variation only")


def calibrate(run_dirs: list[Path], out: Path | None) -> Path:
    runs = [load_run(d) for d in run_dirs]
    calibration = measure(runs)
    target = out or default_path()[0] or DEFAULT_PATH
    calibration.save(target)
    for kind, figures in sorted(calibration.spreads.items(), key=str):
        if kind[1] is None:
            text = ", ".join(f"{f} {100 * s.sd:.1f} %" for f, s in figures.items()
                             if f in ("output_token_throughput", "ttft_p50", "tpot_mean", "e2e_p50"))
            print(f"{kind[0]} {kind[2]}: run-to-run sd {text}", file=sys.stderr)
    return target


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m reports.calibrate",
                                description="Measure the run-to-run variation of each kind of cell (server, task, "
                                            "mode, load level) beyond what a run's own interval shows, from run "
                                            "folders with repeats (--repeat R, one machine), into a calibration "
                                            "file the reports widen single-run intervals by.")
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="run folders made with --repeat R")
    p.add_argument("--out", type=Path, default=None,
                   help=f"calibration file to write (default: ${ENV}, else {DEFAULT_PATH})")
    args = p.parse_args(argv)
    return report_command(lambda: calibrate(args.run_dirs, args.out))


if __name__ == "__main__":
    raise SystemExit(main())
