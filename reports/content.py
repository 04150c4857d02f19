"""What the report says, once for its Markdown (:mod:`reports.merge`) and its HTML page (:mod:`reports.html`): the
run's identity, the notes on its statistics and each section's tables (:class:`reports.format.Table`) from the typed
report (:class:`reports.report.Report`)."""

from __future__ import annotations

from llmload.core.points import TRACE_PHASE
from llmload.core.metrics import headline_columns
from llmload.core.stats import RESAMPLES, SEED, WITHIN_RUN, Interval, min_samples
from reports import sections
from reports.format import Table, estimate_text, figure_text, number, ratio_text, row_covers, title
from reports.report import Report
from reports.rows import RATIO_COLUMNS, Ratio, Row

#: Resource columns the Markdown table shows (when measured).
MD_PEAKS = ["peak_server_rss_mib", "peak_server_gpu_mib"]


def present(rows: list, columns: list[str]) -> list[str]:
    """The columns that hold a value in at least one row."""
    return [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]


def summary_table(rows: list[Row], peaks: list[str]) -> Table:
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

    return Table([title(c) for c in ident] + ["intervals"] + [title(c) for c in columns], [line(r) for r in rows])


def ratio_table(ratios: list[Ratio]) -> Table:
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
    return Table(["ratio", "task", "mode", "level", "intervals"] + [title(c) for c in columns], body)


def tokens_table(report: Report) -> Table:
    columns = ["server", "requests", "usage_reported", "usage_missing", "usage_zero", "compared", "mismatch_pct",
               "mean_difference", "max_abs_difference", "relative_difference_pct", "token_source", "verdict"]
    titles = ["server", "requests", "usage reported", "usage missing", "usage 0 beside text",
              "compared with the tokenizer", "mismatch %", "mean usage - tokenizer", "max abs difference",
              "relative difference %", "counts used", "verdict"]
    body = [[None if r.get(c) is None else (number(r.get(c)) if isinstance(r.get(c), float) else r.get(c))
             for c in columns] for r in report.tokens]
    return Table(titles, body)


def identity(report: Report) -> list[tuple[str, str]]:
    """The run's identity as (what, text) lines: command, model, machine, versions, SLO, order, baseline."""
    info = report.run.manifest
    lines = []
    if info:
        m = info.get("machine", {})
        lines += [("command", f"`{info.get('command', '')}`"),
                  ("model", f"{info.get('served_model_name')} ({info.get('model')})")]
        if m:
            lines.append(("machine", f"{m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, "
                                     f"GPUs: {m.get('gpus') or 'none'}"))
        if info.get("versions"):
            lines.append(("versions", ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v)))
    if info.get("slo"):
        lines.append(("SLO", sections.slo_text(info)))
    order = sections.order_text(info)
    if order:
        lines.append(("order", f"{order} (the sequence: \"Order of the cells\" below, order.csv)"))
    lines.append(("baseline", report.baseline or "none (no ratios)"))
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


LEAD = ("Latencies in ms, from the raw per-request logs (warm-up excluded); throughput over each cell's wall time. "
        + STATS_NOTE)


def ratio_note(report: Report) -> str:
    return (f"`{report.baseline} / X` of each figure, point by point, with its 95 % interval: where both have 2 "
            "or more repeats, Student's t over each block's ratio (repeats paired by the block of the "
            "interleaved order they ran in; Welch's t over the repeats' figures in a sequential run), else a "
            "paired block bootstrap over the "
            "prompt occurrences both answered, widened by both cells' calibrated run-to-run variation where "
            "there is a calibration; `*`: significant (the interval excludes 1 and covers run-to-run "
            "variation). Above 1, "
            f"{report.baseline}'s figure is the larger (faster for throughputs, slower for latencies).")


def tokens_note(report: Report) -> str:
    return ("Token throughput counts the server's usage (`counts used`: usage, or the stream's text chunks "
            f"where usage was missing). {report.tokenizer_note}. Re-tokenizing a generated text does not give its "
            "tokens back exactly (merges differ at a few places), so honest servers differ from the tokenizer by a "
            "token or two on some requests; a server is flagged when its usage is missing, 0 beside text, below "
            "the text's count, or off by more than 10 %.")


def flagged_tokens(report: Report) -> list[str]:
    return [f"{r.server}: {r.verdict}" for r in report.tokens if r.verdict != "ok"]


def missing_cells(report: Report) -> list[str]:
    """One line per cell that did not complete: its point, repeat, status and error."""
    return [c.point.label + (f" repeat {c.repeat}" if c.repeat else "") + f": {c.status}: {c.error}"
            for c in report.run.cells if c.status != "ok"]


CAPACITY_NOTE = ("The highest offered rate each server holds with the SLO met by the target share of requests, "
                 "with its interval: a step holds once the Clopper-Pearson lower bound of its attainment reaches "
                 "the target and its queue is not growing (Mann-Kendall on the backlog), fails once the upper "
                 "bound is below it or the queue grows, and sends more requests in between; the interval runs "
                 "from the highest held rate less the bound on its queue's growth to the lowest failed rate, the "
                 "error budget split over every test of the search (docs/statistics.md, \"Capacity\"). "
                 "`held / not held`: the rates the bisection ended between.")
REPEATS_NOTE = "Throughput over repeats: mean [Student's t 95 % interval] (min, max; each repeat)."
TURNS_NOTE = "By turn index (0 = the first user turn; later turns carry the whole history)."
PREFIX_NOTE = ("TTFT with the prefix cache off and on, on the same prompts; off / on above 1: the cache shortens "
               "the time to first token (`*`: significant).")


def capacity_table(report: Report) -> Table:
    body = [[r.server, r.task, r.mode, r.slo, None if r.slo_target is None else f"{r.slo_target:g} %",
             r.capacity_text, r.interval,
             None if r.held_rps is None else f"{number(r.held_rps)} / "
             f"{'none' if r.not_held_rps is None else number(r.not_held_rps)}",
             None if r.saturation_rps is None else number(r.saturation_rps),
             f"{r.steps} ({r.cells} cells" + (f", {r.undecided} undecided)" if r.undecided else ")")]
            for r in report.capacity]
    return Table(["server", "task", "mode", "SLO", "target", "capacity req/s", "interval", "held / not held req/s",
                  "saturation req/s", "steps"], body)


def repeats_table(report: Report) -> Table:
    body = []
    for r in report.repeats:
        line = [r.point.label, r.repeats]
        for column in sections.THROUGHPUTS:
            s = r.spreads.get(column)
            if s is None:
                line.append(None)
                continue
            iv = Interval(s.mean, s.ci_low, s.ci_high, r.repeats)
            line.append(f"{figure_text(column, s.mean, iv)} (min {number(s.min)}, max {number(s.max)}; "
                        + ", ".join(number(v) for v in s.values) + ")")
        body.append(line)
    return Table(["cell", "repeats"] + [title(c) for c in sections.THROUGHPUTS], body)


def turns_table(report: Report) -> Table:
    body = [[r.point.label, r.get("turn"), r.get("requests"), estimate_text("ttft_p50", r),
             estimate_text("e2e_p50", r)] for r in report.turns]
    return Table(["cell", "turn", "requests", title("ttft_p50"), title("e2e_p50")], body)


def order_table(report: Report) -> Table:
    body = [[r.order, r.block, (r.started or "")[11:], r.point.label + (f" #{r.repeat + 1}" if r.repeat else ""),
             r.wall_s, r.status] for r in report.order]
    return Table(["#", "block", "started", "cell", "s", "status"], body)


def prefix_table(report: Report) -> Table:
    body = [[f"{r.top.point.server} / {r.bottom.point.server}", r.top.point.task, r.top.point.mode,
             r.top.point.level, title(r.metric), estimate_text(r.metric, r.top),
             estimate_text(r.metric, r.bottom), ratio_text(r.interval)] for r in report.prefix]
    return Table(["cache off / on", "task", "mode", "level", "figure", "cache off", "cache on", "off / on [95 %]"],
                 body)
