"""Merge one run folder into its report: summary tables (CSV, Markdown), server ratios and PNG plots.

    python -m reports.merge results/20261202-130000 [--baseline NAME] [--out DIR]

Every figure comes from the metric catalogue (:mod:`llmload.core.metrics`:
``summarize`` on each cell's raw log, ``ratio`` for every ratio, baseline over
server) and the resource monitor (:func:`monitors.sampler.peak_usage`); the
columns are the catalogue's, so a metric added there appears here. Plots draw
the merged rows only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.metrics import headline_columns, ratio, summary_columns
from llmload.core.tables import render
from reports.format import shown, title
from reports.run import CellData, ReportError, RunData, load_run, resolve_baseline

IDENTITY = ["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "status"]
TRAILER = ["token_source", "locust_requests", "error"]
#: Columns compared between servers: the throughputs and the headline latency statistics.
RATIO_COLUMNS = [c for c in headline_columns()
                 if c in ("request_throughput", "output_token_throughput")
                 or c.rpartition("_")[0] in ("e2e", "ttft", "tpot", "tokens_per_s")]
#: Resource columns the Markdown table shows (when measured).
MD_PEAKS = ["peak_server_rss_mib", "peak_server_gpu_mib"]


def peak_columns(cells: list[CellData]) -> list[str]:
    """The monitor's peak keys: ``monitors.sampler.PEAK_KEYS``, then any other key ``peak_usage`` gave."""
    from monitors.sampler import PEAK_KEYS

    keys = list(PEAK_KEYS)
    for c in cells:
        keys += [k for k in c.peaks if k not in keys]
    return keys


def csv_columns(peaks: list[str]) -> list[str]:
    return IDENTITY + summary_columns() + peaks + TRAILER


def token_source(data: CellData) -> str | None:
    """Where the cell's output token counts came from: ``usage``, ``chunks``, ``none`` or a mix with counts."""
    counts: dict[str, int] = {}
    for r in data.measured:
        if r.success:
            counts[r.output_tokens_source] = counts.get(r.output_tokens_source, 0) + 1
    if not counts:
        return None
    if len(counts) == 1:
        return next(iter(counts))
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def cell_row(data: CellData) -> dict:
    """One summary row: the cell's identity, its figures from the raw log, its resource peaks."""
    cell = data.cell
    row = {"server": cell.server, "task": cell.task, "mode": cell.mode, "concurrency": cell.concurrency,
           "rate": cell.rate, "repeat": cell.repeat, "phase": cell.phase, "status": data.status,
           "error": data.error, "locust_requests": data.locust_requests, "token_source": token_source(data)}
    if data.summary is not None:
        row.update(data.summary.flat())
    row.update(data.peaks)
    return row


def level(row: dict) -> str:
    return f"r{row['rate']:g}/s" if row.get("rate") is not None else f"c{row['concurrency']}"


def same_point(row: dict) -> tuple:
    """What two servers' rows share to be compared: task, mode, load level and phase."""
    return (row["task"], row["mode"], row["concurrency"], row.get("rate"), row.get("phase"))


def ratio_name(baseline: str, server: str) -> str:
    return f"{baseline} / {server}"


def ratio_rows(rows: list[dict], baseline: str | None) -> list[dict]:
    """Baseline over each other server, cell by cell, for :data:`RATIO_COLUMNS` (long form, one row each)."""
    if baseline is None:
        return []
    tops = {same_point(r): r for r in rows if r["server"] == baseline and r["status"] == "ok"}
    out = []
    for row in rows:
        top = tops.get(same_point(row))
        if row["server"] == baseline or row["status"] != "ok" or top is None:
            continue
        for column in RATIO_COLUMNS:
            if top.get(column) is None or row.get(column) is None:
                continue  # not measured in this mode
            value = ratio(top.get(column), row.get(column))
            out.append({"ratio": ratio_name(baseline, row["server"]), "baseline": baseline,
                        "server": row["server"], "task": row["task"], "mode": row["mode"],
                        "concurrency": row["concurrency"], "rate": row.get("rate"), "phase": row.get("phase"),
                        "metric": column, "value": value})
    return out


RATIO_CSV = ["ratio", "baseline", "server", "task", "mode", "concurrency", "rate", "phase", "metric", "value"]


@dataclass
class Report:
    """Everything a report shows, computed once from a run."""

    run: RunData
    baseline: str | None
    rows: list[dict]
    ratios: list[dict]
    peaks: list[str]
    plots: list[Path] = field(default_factory=list)


def build_report(run: RunData, baseline: str | None = None) -> Report:
    base = resolve_baseline(run, baseline)
    rows = [cell_row(c) for c in run.cells]
    return Report(run=run, baseline=base, rows=rows, ratios=ratio_rows(rows, base), peaks=peak_columns(run.cells))


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def present(rows: list[dict], columns: list[str]) -> list[str]:
    """The columns that hold a value in at least one row."""
    return [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]


def table(rows: list[dict], columns: list[str], cell=None) -> str:
    """A Markdown table of ``rows`` (values through ``cell(row, column)``, default :func:`shown`)."""
    cell = cell or (lambda row, column: shown(column, row.get(column)))
    return render([[cell(r, c) for c in columns] for r in rows], [title(c) for c in columns])


def _identity_cell(row: dict, column: str):
    if column == "level":
        return level(row)
    return row.get(column)


def summary_table(rows: list[dict]) -> str:
    ident = ["server", "task", "mode", "level", "status"]
    columns = present(rows, headline_columns() + MD_PEAKS)

    def cell(row, column):
        return _identity_cell(row, column) if column in ident else shown(column, row.get(column))

    return table(rows, ident + columns, cell)


def ratio_table(ratios: list[dict]) -> str:
    """One row per server and cell, one column per compared metric."""
    by_point: dict[tuple, dict] = {}
    for r in ratios:
        key = (r["ratio"], r["task"], r["mode"], r["concurrency"], r.get("rate"), r.get("phase"))
        entry = by_point.setdefault(key, {"ratio": r["ratio"], "task": r["task"], "mode": r["mode"],
                                          "concurrency": r["concurrency"], "rate": r.get("rate")})
        entry[r["metric"]] = r["value"]
    rows = list(by_point.values())
    columns = present(rows, RATIO_COLUMNS)
    ident = ["ratio", "task", "mode", "level"]

    def cell(row, column):
        if column in ident:
            return _identity_cell(row, column)
        value = row.get(column)
        return None if value is None else f"{value:.2f}"

    return render([[cell(r, c) for c in ident + columns] for r in rows], ident + [title(c) for c in columns])


def header_lines(report: Report) -> list[str]:
    info = report.run.manifest
    lines = [f"# Load-test report: {report.run.path.name}", ""]
    if info:
        m = info.get("machine", {})
        lines += [f"- command: `{info.get('command', '')}`",
                  f"- model: {info.get('served_model_name')} ({info.get('model')})",
                  f"- machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, "
                  f"GPUs: {m.get('gpus') or 'none'}",
                  "- versions: " + ", ".join(f"{k} {v}" for k, v in info.get("versions", {}).items() if v)]
    lines += [f"- baseline: {report.baseline or 'none (no ratios)'}", ""]
    return lines


def markdown(report: Report) -> str:
    parts = header_lines(report)
    parts += ["Latencies in ms, from the raw per-request logs (warm-up excluded); throughput over each cell's "
              "wall time.", "", summary_table(report.rows), ""]
    if report.ratios:
        parts += [f"## Ratios: {report.baseline} over each server", "",
                  f"`{report.baseline} / X` of each figure, cell by cell: above 1, {report.baseline}'s figure is "
                  "the larger (faster for throughputs, slower for latencies).", "", ratio_table(report.ratios), ""]
    missing = [r for r in report.rows if r["status"] != "ok"]
    if missing:
        parts += ["## Missing or failed cells", ""]
        parts += [f"- {r['server']} {r['task']} {r['mode']} {level(r)}: {r['status']}: {r['error']}" for r in missing]
        parts.append("")
    if report.plots:
        parts += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in report.plots] + [""]
    return "\n".join(parts)


def write_report(report: Report, out_dir: Path) -> Path:
    """Write ``summary.csv``, ``ratios.csv``, the plots and ``summary.md``; return ``summary.md``."""
    from reports.plots import write_plots

    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "summary.csv", report.rows, csv_columns(report.peaks))
    write_csv(out_dir / "ratios.csv", report.ratios, RATIO_CSV)
    report.plots = write_plots(report.rows, report.ratios, out_dir, baseline=report.baseline)
    path = out_dir / "summary.md"
    path.write_text(markdown(report))
    return path


def merge_run(run_dir: str | Path, out_dir: str | Path | None = None, baseline: str | None = None) -> Path:
    """Merge ``run_dir`` into ``out_dir`` (default ``run_dir/report``); return the Markdown summary."""
    run = load_run(run_dir)
    report = build_report(run, baseline)
    return write_report(report, Path(out_dir) if out_dir else run.path / "report")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reports.merge",
                                description="Merge a run folder (from python -m llmload.runner) into summary "
                                            "tables (CSV, Markdown), server ratios and PNG plots.")
    p.add_argument("run_dir", type=Path, help="the run folder, e.g. results/20261202-130000")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_DIR/report)")
    p.add_argument("--baseline", default=None,
                   help="server every ratio is taken over: baseline / server (default: run.json's baseline, "
                        "else vllm when the run has it)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        summary = merge_run(args.run_dir, args.out, args.baseline)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
