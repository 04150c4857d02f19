"""Merge one run folder into its report: summary tables (CSV, Markdown), server ratios and PNG plots.

    python -m reports.merge results/20261202-130000 [--baseline NAME] [--out DIR] [--tokenizer PATH | --no-tokenizer]
                                                    [--calibration FILE | --no-calibration]

Every figure comes from the metric catalogue (:mod:`llmload.core.metrics`:
``summarize`` on each cell's raw log, ``ratio`` for every ratio, baseline over
server), its interval from :mod:`llmload.core.stats` (the block bootstrap over
requests in time order, order statistics for percentiles of uncorrelated values,
paired blocks of prompt occurrences for ratios, widened by a calibration of the
run-to-run variation where one was measured on this machine, Student's t over
repeats), resources from :func:`monitors.sampler.peak_usage`. Every interval says
what it covers. The columns are the catalogue's, so a metric added there appears
here. Plots draw the merged rows only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.calibration import Calibration
from llmload.core.cliargs import OneLineParser
from llmload.core.points import TRACE_PHASE, Point
from llmload.core.metrics import FIGURES, METRICS, headline_columns
from llmload.core.stats import RESAMPLES, SEED, WITHIN_RUN, Interval, min_samples
from llmload.core.tables import render
from monitors.sampler import PEAK_KEYS
from reports.calibrate import add_calibration_options, applicable, find_calibration
from reports.estimates import estimated
from reports import cost, sections, steady
from reports.format import estimate_text, figure_text, number, ratio_text, row_covers, title
from reports.rows import RATIO_COLUMNS, Ratio, Row, ratio_record, ratios_of, run_rows, write_csv
from reports.run import CellData, RunData, load_run, report_command, resolve_baseline
from reports.tokens import REQUEST_COLUMNS, SERVER_COLUMNS, find_tokenizer, reconcile

IDENTITY = ["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "status"]
TRAILER = ["token_source", "chunk_token_source", "client_error_ms", "client_error_flags", "locust_requests", "error"]
RATIO_CSV = ["ratio", "baseline", "server", "task", "mode", "concurrency", "rate", "phase", "metric", "value",
             "ci_low", "ci_high", "covers", "significant", "pairs", "method"]
#: Resource columns the Markdown table shows (when measured).
MD_PEAKS = ["peak_server_rss_mib", "peak_server_gpu_mib"]


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


@dataclass
class Report:
    """Everything a report shows, computed once from a run."""

    run: RunData
    baseline: str | None
    rows: list[Row]  # one per cell (summary.csv)
    groups: list[Row]  # one per load point, repeats pooled (the Markdown tables, the plots)
    ratios: list[Ratio]
    peaks: list[str]
    tokens: list[dict] = field(default_factory=list)
    token_requests: list[dict] = field(default_factory=list)
    tokenizer_note: str = ""
    calibration: Calibration | None = None
    calibration_note: str = ""
    warnings: list[str] = field(default_factory=list)
    capacity: list[dict] = field(default_factory=list)
    capacity_ratios: list[Ratio] = field(default_factory=list)
    goodput_steps: list[dict] = field(default_factory=list)
    repeats: list[dict] = field(default_factory=list)
    turns: list[Row] = field(default_factory=list)
    series: list[dict] = field(default_factory=list)
    prefix: list[Ratio] = field(default_factory=list)
    order: list[dict] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    steady: list[steady.SteadyRow] = field(default_factory=list)
    cost: list[dict] = field(default_factory=list)
    capacity_cost: list[dict] = field(default_factory=list)


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
    return Report(run=run, baseline=base, rows=rows, groups=groups, ratios=ratio_rows(groups, base, calibration),
                  calibration=calibration, calibration_note=calibration_note, peaks=peak_columns(run.cells),
                  tokens=tokens, token_requests=token_requests,
                  tokenizer_note=note, warnings=sections.lag_warnings(groups) + sections.client_error_warnings(groups),
                  capacity=capacity,
                  capacity_ratios=sections.capacity_ratios(run.capacity, base),
                  goodput_steps=sections.goodput_steps(run), repeats=sections.repeat_rows(groups),
                  turns=sections.turn_rows(run), series=sections.server_series(run),
                  prefix=sections.prefix_rows(groups, run.prefix_caching, calibration),
                  steady=steady.steady_rows(run, rows), cost=cost.cost_rows(run, rows),
                  capacity_cost=cost.capacity_cost_rows(run, rows), order=sections.order_rows(run))


# --------------------------------------------------------------------------- writing


def present(rows: list, columns: list[str]) -> list[str]:
    """The columns that hold a value in at least one row."""
    return [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]


def summary_table(rows: list[Row], peaks: list[str]) -> str:
    ident = (["server", "task", "mode", "level"]
             + (["phase"] if any(r.get("phase") not in ("matrix", None) for r in rows) else [])
             + (["repeats"] if any((r.get("repeats") or 0) > 1 for r in rows) else []) + ["status"])
    extra = [p for p in peaks if p in MD_PEAKS or ("_server_" in p and not p.endswith("_mib"))]
    columns = present(rows, headline_columns() + extra)
    if any(r.get("token_source") not in ("usage", None) for r in rows):
        columns.append("token_source")
    if any(r.get("chunk_token_source") not in ("usage", "none", None) for r in rows):  # ITL not from the server
        columns.append("chunk_token_source")
    columns += present(rows, ["client_error_ms"])

    def text(column: str, row: Row, covers) -> str | None:
        if column == "client_error_ms":  # a flag where the bound passes 5 % of the row's TTFT p50 or ITL mean
            flagged = row.get("client_error_flags")
            return number(row.get(column)) + (f" ! {flagged}" if flagged else "") if row.get(column) is not None \
                else None
        return estimate_text(column, row, covers)

    def line(row):
        covers = row_covers(row.interval(c) for c in columns)
        return ([row.point.load.label if c == "level" else row.get(c) for c in ident] + [covers]
                + [text(c, row, covers) for c in columns])

    return render([line(r) for r in rows], [title(c) for c in ident] + ["intervals"] + [title(c) for c in columns])


def ratio_table(ratios: list[Ratio]) -> str:
    """One row per server and point, one column per compared metric."""
    by_point: dict[tuple, tuple[list, dict]] = {}
    for r in ratios:
        point = r.bottom.point
        _, ivs = by_point.setdefault((r.get("ratio"), point.shared), (
            [r.get("ratio"), point.task, point.mode, point.level], {}))
        ivs[r.metric] = r.interval
    columns = [c for c in RATIO_COLUMNS if any(c in ivs for _, ivs in by_point.values())]
    body = []
    for ident, ivs in by_point.values():
        covers = row_covers(ivs.values())
        body.append(ident + [covers] + [ratio_text(ivs.get(c), covers) for c in columns])
    return render(body, ["ratio", "task", "mode", "level", "intervals"] + [title(c) for c in columns])


def tokens_table(report: Report) -> str:
    columns = ["server", "requests", "usage_reported", "usage_missing", "usage_zero", "compared", "mismatch_pct",
               "mean_difference", "max_abs_difference", "relative_difference_pct", "token_source", "verdict"]
    titles = ["server", "requests", "usage reported", "usage missing", "usage 0 beside text",
              "compared with the tokenizer", "mismatch %", "mean usage - tokenizer", "max abs difference",
              "relative difference %", "counts used", "verdict"]
    body = [[None if r.get(c) is None else (number(r[c]) if isinstance(r[c], float) else r[c]) for c in columns]
            for r in report.tokens]
    return render(body, titles)


def header_lines(report: Report) -> list[str]:
    info = report.run.manifest
    lines = [f"# Load-test report: {report.run.path.name}", ""]
    if info:
        m = info.get("machine", {})
        lines += [f"- command: `{info.get('command', '')}`",
                  f"- model: {info.get('served_model_name')} ({info.get('model')})"]
        if m:
            lines.append(f"- machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, "
                         f"GPUs: {m.get('gpus') or 'none'}")
        if info.get("versions"):
            lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    if info.get("slo"):
        lines.append(f"- SLO: {sections.slo_text(info)}")
    order = sections.order_text(report.run)
    if order:
        lines.append(f"- order: {order} (the sequence: \"Order of the cells\" below, order.csv)")
    lines += [f"- baseline: {report.baseline or 'none (no ratios)'}", ""]
    return lines


STATS_NOTE = (f"Each figure: value [95 % interval]; `intervals` says what they cover: `{WITHIN_RUN}` (the "
              f"requests and the time within one run), `within-run + calibrated run-to-run` (widened by this "
              f"machine's measured run-to-run variation) or `across R repeats` (Student's t over the repeats' "
              f"figures; the value is their mean). Within a run: a circular block bootstrap over the requests in "
              f"start-time order, in blocks as long as the figure's errors stay correlated ({RESAMPLES} resamples, "
              f"seed {SEED}; inter-token gaps move with their request); a percentile of uncorrelated values: the "
              f"distribution-free interval between two order statistics; throughputs: tokens / (sum of E2E / "
              f"effective concurrency). A percentile p needs n >= ln(0.025) / ln(max(p, 1 - p)) values (p50 "
              f"{min_samples('p50')}, p90 {min_samples('p90')}, p99 {min_samples('p99')}): `n=8<368` marks one "
              f"with too few; means and rates need {min_samples('mean')}, `(n=8)` marks a value without an "
              f"interval (docs/statistics.md).")


def run_to_run_note(report: "Report") -> str:
    """The report's one statement of what its single-run intervals leave out, or of the calibration they use."""
    if report.calibration is not None:
        return (f"Run-to-run variation: {report.calibration_note}; single-run intervals are widened by it where it "
                "has the kind of cell and figure.")
    return (f"Run-to-run variation: {report.calibration_note}. Single-run intervals are therefore `{WITHIN_RUN}`, "
            "and single-run ratios are not marked significant: repeated runs of a cell differ by more than one "
            "run's interval shows (docs/statistics.md).")


def main_rows(report: Report) -> tuple[list[Row], list[Row]]:
    """(matrix and trace rows, sweep/capacity rows) of the pooled groups."""
    first = ("matrix", TRACE_PHASE)
    return ([r for r in report.groups if r.point.phase in first],
            [r for r in report.groups if r.point.phase not in first])


def markdown(report: Report) -> str:
    parts = header_lines(report)
    matrix, other = main_rows(report)
    parts += ["Latencies in ms, from the raw per-request logs (warm-up excluded); throughput over each cell's "
              "wall time. " + STATS_NOTE, "", run_to_run_note(report), ""]
    if matrix:
        parts += [summary_table(matrix, report.peaks), ""]
    if other:
        parts += ["## Sweep and capacity cells", "", summary_table(other, report.peaks), ""]
    if report.ratios:
        parts += [f"## Ratios: {report.baseline} over each server", "",
                  f"`{report.baseline} / X` of each figure, point by point, with its 95 % interval: where both have 2 "
                  "or more repeats, Student's t over each block's ratio (repeats paired by the block of the "
                  "interleaved order they ran in; Welch's t over the repeats' figures in a sequential run), else a "
                  "paired block bootstrap over the "
                  "prompt occurrences both answered, widened by both cells' calibrated run-to-run variation where "
                  "there is a calibration; `*`: significant (the interval excludes 1 and covers run-to-run "
                  "variation). Above 1, "
                  f"{report.baseline}'s figure is the larger (faster for throughputs, slower for latencies).", "",
                  ratio_table(report.ratios), ""]
    if report.warnings:
        parts += ["## Warnings", ""] + [f"- {line}" for line in report.warnings] + [""]
    parts += section_lines(report)
    parts += steady.lines(report.steady, figure_text)
    parts += cost.lines(report.cost, report.capacity_cost)
    parts += ["## Output tokens", "",
              "Token throughput counts the server's usage (`counts used`: usage, or the stream's text chunks "
              f"where usage was missing). {report.tokenizer_note}. Re-tokenizing a generated text does not give its "
              "tokens back exactly (merges differ at a few places), so honest servers differ from the tokenizer by a "
              "token or two on some requests; a server is flagged when its usage is missing, 0 beside text, below "
              "the text's count, or off by more than 10 %.", ""]
    if report.tokens:
        parts += [tokens_table(report), ""]
        parts += [f"- {r['server']}: {r['verdict']}" for r in report.tokens if r["verdict"] != "ok"]
        parts.append("")
    missing = [r for r in report.rows if not r.ok]
    if missing:
        parts += ["## Missing or failed cells", ""]
        parts += [f"- {data.cell.point.label}"
                  + (f" repeat {data.cell.repeat}" if data.cell.repeat else "") + f": {data.status}: {data.error}"
                  for data in report.run.cells if data.status != "ok"]
        parts.append("")
    if report.plots:
        parts += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in report.plots] + [""]
    return "\n".join(parts)


def section_lines(report: Report) -> list[str]:
    """The capacity, repeats, turns, order and prefix-cache sections (where the run has their data)."""
    parts: list[str] = []
    if report.capacity:
        body = [[r["server"], r["task"], r["mode"], r["slo"], None if r["slo_target"] is None else f"{r['slo_target']:g} %",
                 r["capacity_text"], r["interval"],
                 None if r["held_rps"] is None else f"{number(r['held_rps'])} / "
                 f"{'none' if r['not_held_rps'] is None else number(r['not_held_rps'])}",
                 None if r["saturation_rps"] is None else number(r["saturation_rps"]),
                 f"{r['steps']} ({r['cells']} cells" + (f", {r['undecided']} undecided)" if r["undecided"] else ")")]
                for r in report.capacity]
        parts += ["## Capacity at SLO", "",
                  "The highest offered rate each server holds with the SLO met by the target share of requests, "
                  "with its interval: a step holds once the Clopper-Pearson lower bound of its attainment reaches "
                  "the target and its queue is not growing (Mann-Kendall on the backlog), fails once the upper "
                  "bound is below it or the queue grows, and sends more requests in between; the interval runs "
                  "from the highest held rate less the bound on its queue's growth to the lowest failed rate, the "
                  "error budget split over every test of the search (docs/statistics.md, \"Capacity\"). "
                  "`held / not held`: the rates the bisection ended between.", "",
                  render(body, ["server", "task", "mode", "SLO", "target", "capacity req/s", "interval",
                                "held / not held req/s", "saturation req/s", "steps"]), ""]
        parts += [f"- {sections.capacity_sentence(r)}" for r in report.capacity_ratios] + [""]
    if report.repeats:
        body = []
        for r in report.repeats:
            line = [Point.of(r).label, r["repeats"]]
            for column in sections.THROUGHPUTS:
                if f"{column}_mean" not in r:
                    line.append(None)
                    continue
                iv = Interval(r[f"{column}_mean"], r[f"{column}_ci_low"], r[f"{column}_ci_high"], r["repeats"])
                line.append(f"{figure_text(column, r[f'{column}_mean'], iv)} (min {number(r[f'{column}_min'])}, "
                            f"max {number(r[f'{column}_max'])}; "
                            + ", ".join(number(v) for v in r[f"{column}_values"]) + ")")
            body.append(line)
        parts += ["## Repeats", "", "Throughput over repeats: mean [Student's t 95 % interval] (min, max; each "
                  "repeat).", "", render(body, ["cell", "repeats"] + [title(c) for c in sections.THROUGHPUTS]), ""]
    if report.turns:
        body = [[r.point.label, r.get("turn"), r.get("requests"), estimate_text("ttft_p50", r),
                 estimate_text("e2e_p50", r)] for r in report.turns]
        parts += ["## Multi-turn conversations", "", "By turn index (0 = the first user turn; later turns carry the "
                  "whole history).", "", render(body, ["cell", "turn", "requests", title("ttft_p50"),
                                                      title("e2e_p50")]), ""]
    parts += sections.cancel_lines(report.series)
    if report.order:
        body = [[r["order"], r["block"], (r["started"] or "")[11:], Point.of(r).label
                 + (f" #{r['repeat'] + 1}" if r["repeat"] else ""), r["wall_s"], r["status"]] for r in report.order]
        parts += ["## Order of the cells", "", f"As run: {sections.order_text(report.run) or 'see order.csv'}.", "",
                  render(body, ["#", "block", "started", "cell", "s", "status"]), ""]
    if report.prefix:
        body = [[f"{r.top.point.server} / {r.bottom.point.server}", r.top.point.task, r.top.point.mode,
                 r.top.point.level, title(r.metric), estimate_text(r.metric, r.top),
                 estimate_text(r.metric, r.bottom), ratio_text(r.interval)] for r in report.prefix]
        parts += ["## Prefix caching", "",
                  "TTFT with the prefix cache off and on, on the same prompts; off / on above 1: the cache shortens "
                  "the time to first token (`*`: significant).", "",
                  render(body, ["cache off / on", "task", "mode", "level", "figure", "cache off", "cache on",
                                "off / on [95 %]"]), ""]
    return parts


def write_report(report: Report, out_dir: Path) -> Path:
    """Write the CSVs, the plots and ``summary.md``; return ``summary.md``."""
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
                                ("order.csv", report.order, sections.ORDER_COLUMNS)):
        if rows:
            write_csv(out_dir / name, rows, columns)
    write_csv(out_dir / "tokens.csv", report.tokens, SERVER_COLUMNS)
    write_csv(out_dir / "tokens_requests.csv", report.token_requests, REQUEST_COLUMNS)
    report.plots = write_plots(report.groups, report.ratios, out_dir, baseline=report.baseline,
                               goodput_steps=report.goodput_steps, turns=report.turns,
                               server_series=report.series, capacity=report.capacity)
    path = out_dir / "summary.md"
    path.write_text(markdown(report))
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


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m reports.merge",
                                description="Merge a run folder (from python -m llmload.runner) into summary "
                                            "tables (CSV, Markdown) with 95 % intervals, server ratios and PNG "
                                            "plots.")
    p.add_argument("run_dir", type=Path, help="the run folder, e.g. results/20261202-130000")
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return report_command(lambda: merge_run(args.run_dir, args.out, args.baseline, args.tokenizer,
                                            not args.no_tokenizer, args.calibration, not args.no_calibration))


if __name__ == "__main__":
    raise SystemExit(main())
