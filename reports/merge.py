"""Merge one run folder into its report: summary tables (CSV, Markdown), server ratios, PNG plots, the typed
report (``report.json``) and a self-contained HTML page (``report.html``).

    python -m reports.merge results/20261202-130000 [--baseline NAME] [--out DIR] [--tokenizer PATH | --no-tokenizer]
                                                    [--calibration FILE | --no-calibration]
    python -m reports.merge results/20261202-130000/report/report.json [--out DIR]   # written again from the file

Every figure comes from the metric catalogue (:mod:`llmload.core.metrics`:
``summarize`` on each cell's raw log, ``ratio`` for every ratio, baseline over
server), its interval from :mod:`llmload.core.stats` (the block bootstrap over
requests in time order, order statistics for percentiles of uncorrelated values,
paired blocks of prompt occurrences for ratios, widened by a calibration of the
run-to-run variation where one was measured on this machine, Student's t over
repeats), resources from :func:`monitors.sampler.peak_usage`. Every interval says
what it covers. The columns are the catalogue's, so a metric added there appears
here. Plots draw the merged rows only. Everything is computed once into a
:class:`reports.report.Report` (typed, saved as ``report.json``), and every file
is written from it: a report loaded from ``report.json`` writes the same files.
"""

from __future__ import annotations

from pathlib import Path

from llmload.core.calibration import Calibration
from llmload.core.cliargs import OneLineParser
from llmload.core.metrics import FIGURES, METRICS
from monitors.sampler import PEAK_KEYS
from reports.calibrate import add_calibration_options, applicable, find_calibration
from reports.estimates import estimated
from reports import cost, failures, html, sections, steady, timing
from reports.content import (CAPACITY_NOTE, LEAD, PREFIX_NOTE, REPEATS_NOTE, TURNS_NOTE, capacity_table,
                             flagged_tokens, identity, main_rows, missing_cells, order_table, prefix_table,
                             ratio_note, ratio_table, repeats_table, run_to_run_note, summary_table, tokens_note,
                             tokens_table, turns_table)
from reports.format import figure_text
from reports.report import REPORT_JSON, Report, RunInfo
from reports.rows import RATIO_COLUMNS, Ratio, Row, ratio_record, ratios_of, run_rows, write_csv
from reports.run import CellData, RunData, load_run, report_command, resolve_baseline
from reports.tokens import REQUEST_COLUMNS, SERVER_COLUMNS, find_tokenizer, reconcile

IDENTITY = ["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "status"]
TRAILER = ["token_source", "chunk_token_source", "client_error_ms", "client_error_flags", "locust_requests", "error"]
RATIO_CSV = ["ratio", "baseline", "server", "task", "mode", "concurrency", "rate", "phase", "metric", "value",
             "ci_low", "ci_high", "covers", "significant", "pairs", "method"]


def peak_columns(cells: list[CellData]) -> list[str]:
    """The monitor's peak keys: ``monitors.sampler.PEAK_KEYS``, then any other key ``peak_usage`` gave."""
    keys = list(PEAK_KEYS)
    for c in cells:
        keys += [k for k in c.peaks if k not in keys]
    return keys


def interval_columns(column: str) -> list[str]:
    """``<column>_ci_low``, ``_ci_high`` and ``_ci_covers`` (what the interval covers) of an estimated column."""
    return [f"{column}_ci_low", f"{column}_ci_high", f"{column}_ci_covers"] if estimated(column) else []


def value_columns() -> list[str]:
    """:func:`summary_columns` with its :func:`interval_columns` after each estimated one, ``<metric>_n`` per
    metric."""
    out: list[str] = []
    for f in FIGURES:
        out += [f.name] + interval_columns(f.name)
    for m in METRICS:
        for stat in m.stats:
            c = m.column(stat)
            out += [c] + interval_columns(c)
        out.append(f"{m.name}_n")
    return out


def csv_columns(peaks: list[str]) -> list[str]:
    return IDENTITY + value_columns() + peaks + TRAILER


def ratio_name(baseline: str, server: str) -> str:
    return f"{baseline} / {server}"


def ratio_rows(groups: list[Row], baseline: str | None, calibration: Calibration | None = None, columns=None
               ) -> list[Ratio]:
    """Baseline over each other server, point by point, each with its interval (long form)."""
    if baseline is None:
        return []
    tops = {r.point.shared: r for r in groups if r.point.server == baseline and r.ok}
    out = []
    for row in groups:
        top = tops.get(row.point.shared)
        if row.point.server == baseline or not row.ok or top is None:
            continue
        found = ratios_of(top, row, columns or RATIO_COLUMNS, (baseline,) + row.point.key, calibration, by_block=True)
        for column, (value, iv, method) in found.items():
            record = {"ratio": ratio_name(baseline, row.point.server), "baseline": baseline, **row.point.record(),
                      "metric": column, "value": value, **ratio_record(iv, method)}
            out.append(Ratio(column, value, iv, method, record, top, row))
    return out


def build_report(run: RunData, baseline: str | None = None, tokenizer: str | None = None,
                 use_tokenizer: bool = True, calibration: Calibration | None = None) -> Report:
    """Compute every table of the report (no file is written); ``calibration`` is used where it was measured on
    the run's machine."""
    base = resolve_baseline(run, baseline)
    calibration, calibration_note = applicable(calibration, [run])
    rows, groups = run_rows(run, calibration)
    tok, note = find_tokenizer(run.manifest, tokenizer, use_tokenizer)
    tokens, token_requests = reconcile(run, tok)
    capacity = sections.capacity_rows(run)
    return Report(run=RunInfo.of(run), data=run, baseline=base, rows=rows, groups=groups, ratios=ratio_rows(groups, base, calibration),
                  calibration=calibration, calibration_note=calibration_note, peaks=peak_columns(run.cells),
                  tokens=tokens, token_requests=token_requests,
                  tokenizer_note=note, warnings=sections.lag_warnings(groups) + sections.client_error_warnings(groups),
                  capacity=capacity,
                  capacity_ratios=sections.capacity_ratios(run.capacity, base),
                  goodput_steps=sections.goodput_steps(run), repeats=sections.repeat_rows(groups),
                  turns=sections.turn_rows(run), series=sections.server_series(run),
                  prefix=sections.prefix_rows(groups, run.prefix_caching, calibration),
                  steady=steady.steady_rows(run, rows), cost=cost.cost_rows(run, rows),
                  capacity_cost=cost.capacity_cost_rows(run, rows), order=sections.order_rows(run),
                  failures=failures.failure_rows(rows),
                  time_split=timing.split_rows(run, groups))


# --------------------------------------------------------------------------- writing


def header_lines(report: Report) -> list[str]:
    return [f"# Load-test report: {report.run.name}", ""] + [f"- {k}: {v}" for k, v in identity(report)] + [""]


def markdown(report: Report) -> str:
    parts = header_lines(report)
    matrix, other = main_rows(report)
    parts += [LEAD, "", run_to_run_note(report), ""]
    if matrix:
        parts += [summary_table(matrix, report.peaks).markdown(), ""]
    if other:
        parts += ["## Sweep and capacity cells", "", summary_table(other, report.peaks).markdown(), ""]
    if report.ratios:
        parts += [f"## Ratios: {report.baseline} over each server", "", ratio_note(report), "",
                  ratio_table(report.ratios).markdown(), ""]
    if report.warnings:
        parts += ["## Warnings", ""] + [f"- {line}" for line in report.warnings] + [""]
    parts += failures.lines(report.failures)
    parts += timing.lines(report.time_split or [])
    parts += section_lines(report)
    parts += steady.lines(report.steady, figure_text)
    parts += cost.lines(report.cost, report.capacity_cost)
    parts += ["## Output tokens", "", tokens_note(report), ""]
    if report.tokens:
        parts += [tokens_table(report).markdown(), ""]
        parts += [f"- {line}" for line in flagged_tokens(report)]
        parts.append("")
    missing = [r for r in report.rows if not r.ok]
    if missing:
        parts += ["## Missing or failed cells", ""]
        parts += [f"- {line}" for line in missing_cells(report)]
        parts.append("")
    if report.plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in report.plots] + [""]
    return "\n".join(parts)


def section_lines(report: Report) -> list[str]:
    """The capacity, repeats, turns, order and prefix-cache sections (where the run has their data)."""
    parts: list[str] = []
    if report.capacity:
        parts += ["## Capacity at SLO", "", CAPACITY_NOTE, "", capacity_table(report).markdown(), ""]
        parts += [f"- {sections.capacity_sentence(r)}" for r in report.capacity_ratios] + [""]
    if report.repeats:
        parts += ["## Repeats", "", REPEATS_NOTE, "", repeats_table(report).markdown(), ""]
    if report.turns:
        parts += ["## Multi-turn conversations", "", TURNS_NOTE, "", turns_table(report).markdown(), ""]
    parts += sections.cancel_lines(report.series)
    if report.order:
        parts += ["## Order of the cells", "", f"As run: {sections.order_text(report.run.manifest) or 'see order.csv'}.",
                  "", order_table(report).markdown(), ""]
    if report.prefix:
        parts += ["## Prefix caching", "", PREFIX_NOTE, "", prefix_table(report).markdown(), ""]
    return parts



def write_report(report: Report, out_dir: Path) -> Path:
    """Write the CSVs, the plots, ``summary.md``, ``report.json`` and ``report.html``; return ``summary.md``."""
    from reports.plots import write_plots  # matplotlib: only when drawing

    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(out_dir / "summary.csv", report.rows, csv_columns(report.peaks))
    write_csv(out_dir / "ratios.csv", report.ratios + report.capacity_ratios, RATIO_CSV)
    for name, rows, columns in (("capacity.csv", report.capacity, sections.CAPACITY_COLUMNS),
                                ("repeats.csv", report.repeats, sections.REPEAT_COLUMNS),
                                ("turns.csv", report.turns, sections.TURN_COLUMNS),
                                ("prefix_cache.csv", report.prefix, sections.PREFIX_COLUMNS),
                                ("steady.csv", report.steady, steady.STEADY_COLUMNS),
                                ("cost.csv", report.cost, cost.COST_COLUMNS),
                                ("capacity_cost.csv", report.capacity_cost, cost.CAPACITY_COST_COLUMNS),
                                ("failures.csv", report.failures, failures.FAILURE_COLUMNS),
                                ("order.csv", report.order, sections.ORDER_COLUMNS),
                                ("time_split.csv", report.time_split, timing.SPLIT_COLUMNS)):
        if rows:
            write_csv(out_dir / name, rows, columns)
    write_csv(out_dir / "tokens.csv", report.tokens, SERVER_COLUMNS)
    write_csv(out_dir / "tokens_requests.csv", report.token_requests, REQUEST_COLUMNS)
    report.plots = [p.name for p in write_plots(report.groups, report.ratios, out_dir, baseline=report.baseline,
                                                goodput_steps=report.goodput_steps, turns=report.turns,
                                                server_series=report.series, capacity=report.capacity,
                                                time_split=report.time_split or [])]
    path = out_dir / "summary.md"
    path.write_text(markdown(report))
    report.save(out_dir / REPORT_JSON)
    html.write_html(report, out_dir / html.REPORT_HTML)
    return path


def merge_run(run_dir: str | Path, out_dir: str | Path | None = None, baseline: str | None = None,
              tokenizer: str | None = None, use_tokenizer: bool = True, calibration: Path | None = None,
              use_calibration: bool = True) -> Path:
    """Merge ``run_dir`` into ``out_dir`` (default ``run_dir/report``); return the Markdown summary.

    ``calibration``: the calibration file (default: :func:`reports.calibrate.find_calibration`'s).
    """
    run = load_run(run_dir)
    report = build_report(run, baseline, tokenizer, use_tokenizer, find_calibration(calibration, use_calibration))
    return write_report(report, Path(out_dir) if out_dir else run.path / "report")


def rewrite(report_json: str | Path, out_dir: str | Path | None = None) -> Path:
    """Write every file of a saved report again (into ``out_dir``, default: beside it); return the Markdown."""
    path = Path(report_json)
    return write_report(Report.load(path), Path(out_dir) if out_dir else path.parent)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m reports.merge",
                                description="Merge a run folder (from python -m llmload.runner) into summary "
                                            "tables (CSV, Markdown) with 95 % intervals, server ratios, PNG "
                                            "plots, the typed report (report.json) and an HTML page "
                                            "(report.html); or write them again from a saved report.json.")
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                   help="the run folder, e.g. results/20261202-130000; or a saved report.json, whose files are "
                        "written again as it was made (without the raw logs)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_DIR/report)")
    p.add_argument("--baseline", default=None,
                   help="server every ratio is taken over: baseline / server (default: run.json's baseline, "
                        "else vllm when the run has it)")
    add_calibration_options(p)
    tokens = p.add_mutually_exclusive_group()
    tokens.add_argument("--tokenizer", default=None,
                   help="tokenizer (model folder) to recount the generated text with (default: the run's model "
                        "folder, or the embedded model when materialised)")
    tokens.add_argument("--no-tokenizer", action="store_true", help="skip the token reconciliation")
    return p


#: The options that shape a report as it is made, which a saved report.json already holds.
MAKING = ("baseline", "tokenizer", "calibration")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.run_dir.is_file():
        given = [name for name in MAKING if getattr(args, name) is not None]
        if given:
            parser.error(f"--{given[0]}: a saved report is written again as it was made; make it anew from its "
                         "run folder instead")
        return report_command(lambda: rewrite(args.run_dir, args.out))
    return report_command(lambda: merge_run(args.run_dir, args.out, args.baseline, args.tokenizer,
                                            not args.no_tokenizer, args.calibration, not args.no_calibration))


if __name__ == "__main__":
    raise SystemExit(main())
