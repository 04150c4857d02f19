"""The steady window of a cell: where the load held its level, ramp-up and drain left out.

    python -m reports.steady RAW_LOG [RAW_LOG ...]     (e.g. a Locust run's <prefix>_requests.jsonl)

The window is found from the raw log alone (docs/statistics.md, "Steady state"):

1. Two series on equal time bins from the cell's first request start to its last
   dispatch (the last request start; after it nothing enters, so what follows is
   drain): the number of requests in flight (time-weighted mean per bin, from each
   request's start and end, warm-up and failures included: they occupy the server)
   and the output-token throughput (:func:`reports.sections.client_rate`: a
   stream's tokens when they arrived, a sync answer's at its end).
2. Warm-up: MSER-5 (White 1997) on each series: the batch means of 5 bins, and the
   number ``d`` of leading batches that minimises the variance of the kept batch
   means over ``(k - d)^2``. The window starts at the
   later of the two warm-up cuts and ends at the last dispatch less the later of the
   two drain cuts (details and measured
   accuracy in :func:`mser_cut` and the docs). A series whose statistic is lowest
   at its last candidate never settled (a ramp without a plateau, an open loop
   beyond capacity): no window.

The figures over the window go through :func:`llmload.core.metrics.summarize`:
latencies over the measured requests that started in the window (they met the
steady load), throughputs over those that ended in it, divided by the window's
duration (a request counts where its tokens were delivered, so the start-up burst
of a closed loop is not counted as throughput).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmload.core.cliargs import OneLineParser, print_error
from llmload.core.metrics import RequestResult, RunSummary, summarize
from llmload.core.points import Point
from llmload.core.rawlog import read_results
from llmload.core.runfiles import Cell
from llmload.core.stats import Interval
from reports.estimates import Requests, cell_intervals
from reports.format import Part, Table, markdown_section, number, shown, title
from reports.records import Number, Record
from reports.run import CellData, RunData
from reports.sections import client_rate

#: Most bins of the two series (the window's resolution is MSER_BATCH of them).
MAX_BINS = 200
#: Observations per batch mean in MSER-5.
MSER_BATCH = 5
#: A transient that moves a series' kept mean by less than this share of its level is not cut.
MSER_RESOLUTION = 0.001
#: Share of a series the warm-up cut keeps at least, and the drain cut (from the end, after the warm-up cut).
WARMUP_KEEP = 0.25
DRAIN_KEEP = 0.75
#: Fewest batches a series needs for a cut to mean anything, and fewest a cut keeps.
MIN_BATCHES = 20
MIN_KEPT = 10
#: Throughput events (stream chunks, sync answers) a bin should hold on average.
EVENTS_PER_BIN = 4
#: Figures shown whole-run beside steady, in the Markdown table.
COMPARED = ("output_token_throughput", "request_throughput", "ttft_p50", "tpot_mean", "e2e_p50")
THROUGHPUTS = ("request_throughput", "output_token_throughput", "goodput")
STEADY_COLUMNS = ["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "window_start_s",
                  "window_end_s", "span_s", "window_requests", "measured_requests", "share_pct", "reason"] + [
    f"{kind}_{c}" for c in COMPARED for kind in ("whole", "steady")]


def mser_cut(values: np.ndarray, keep: float = WARMUP_KEEP, batch: int = MSER_BATCH, must_settle: bool = True
             ) -> int | None:
    """Leading observations to drop by MSER-``batch`` (White 1997); None when the series never settled.

    ``MSER(d) = sum_{j>d} (Z_j - mean(Z_{>d}))^2 / (k - d)^2`` over the ``k`` batch means
    ``Z``, for every ``d`` that keeps a share ``keep`` of them (and :data:`MIN_KEPT`). The
    cut is the smallest ``d`` whose statistic is within the minimum's noise: two standard
    errors (an estimated variance of ``k - d`` means has a relative standard error of
    ``sqrt(2 / (k - d))``) plus ``(MSER_RESOLUTION x level)^2``, since the statistic
    is about the squared bias of the kept mean and a bias under 1 % of the level is no
    transient. Past the transient the statistic is flat, and its noise alone would
    otherwise pick a cut anywhere along it. A minimum at the last candidate, with no
    earlier one within the resolution of it, means the series still moved at its end: None
    (unless not ``must_settle``: the drain cut from the end is a bounded trim, never a verdict).
    """
    k = len(values) // batch
    if k < MIN_BATCHES:
        return None if must_settle else 0
    z = np.asarray(values[: k * batch], dtype=float).reshape(k, batch).mean(axis=1)
    tail_sum = np.cumsum(z[::-1])[::-1]  # sum of z[d:]
    tail_sq = np.cumsum((z * z)[::-1])[::-1]
    kept = (k - np.arange(k)).astype(float)
    mser = np.maximum(tail_sq - tail_sum * tail_sum / kept, 0.0) / kept ** 2
    last = k - max(MIN_KEPT, int(np.ceil(k * keep)))
    candidates = mser[: last + 1]
    best = int(np.argmin(candidates))
    level = float(tail_sum[best] / kept[best])
    floor = (MSER_RESOLUTION * level) ** 2
    if must_settle and best == last and not (candidates[:last] <= candidates[best] + floor).any():
        return None
    band = candidates[best] * (1.0 + 2.0 * np.sqrt(2.0 / kept[best])) + floor
    return int(np.flatnonzero(candidates <= band)[0]) * batch


def inflight(results: list[RequestResult], t0: float, width: float, bins: int) -> np.ndarray:
    """Time-weighted mean number of requests in flight in each of ``bins`` bins of ``width`` s from ``t0``."""
    starts = np.array([r.start_time for r in results], dtype=float)
    ends = starts + np.array([max(r.end_offset, 0.0) for r in results], dtype=float)
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(steps[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])  # requests x seconds up to each event
    edges = t0 + width * np.arange(bins + 1)
    return np.diff(np.interp(edges, times, area)) / width


@dataclass(frozen=True)
class Window:
    """A cell's steady window (epoch seconds) and where it lies in the cell."""

    start: float
    end: float
    first: float  # the cell's first request start
    last: float  # the cell's last request end
    width: float  # seconds per bin of the series
    head_s: float  # seconds cut after the first start (warm-up)
    tail_s: float  # seconds cut before the last dispatch (a drain that began before it)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def started_in(self, results: list[RequestResult]) -> list[RequestResult]:
        return [r for r in results if self.start <= r.start_time <= self.end]

    def ended_in(self, results: list[RequestResult]) -> list[RequestResult]:
        return [r for r in results if self.start <= r.start_time + r.end_offset <= self.end]


def find_window(results: list[RequestResult]) -> tuple[Window | None, str]:
    """``(window, "")``, or ``(None, why there is none)``; ``results`` as logged (warm-up included)."""
    if len(results) < 2:
        return None, "too few requests"
    first = min(r.start_time for r in results)
    dispatch = max(r.start_time for r in results)
    last = max(r.start_time + max(r.end_offset, 0.0) for r in results)
    span = dispatch - first
    events = sum(len(r.token_offsets) if r.mode == "stream" and r.token_offsets else 1
                 for r in results if r.success and first <= r.start_time + r.end_offset and not r.warmup)
    bins = min(MAX_BINS, events // EVENTS_PER_BIN)
    if span <= 0 or bins < MSER_BATCH * MIN_BATCHES:
        return None, (f"too short: {events} token events before the last dispatch, "
                      f"{MSER_BATCH * MIN_BATCHES * EVENTS_PER_BIN} needed")
    width = span / bins
    load = inflight(results, first, width, bins)
    _, rate = client_rate(results, first, width)
    tokens = np.zeros(bins)
    tokens[: min(bins, len(rate))] = rate[:bins]
    series = {"in-flight count": load, "throughput": tokens}
    heads = {name: mser_cut(values) for name, values in series.items()}
    head = max((cut for cut in heads.values() if cut is not None), default=0)
    tails = {name: mser_cut(values[head:][::-1], keep=DRAIN_KEEP, must_settle=False) for name, values in series.items()}
    unsettled = [name for name in series if heads[name] is None or tails[name] is None]
    if unsettled:
        return None, f"no steady state: the {' and the '.join(unsettled)} did not settle"
    tail = max(tails.values())
    return Window(start=first + head * width, end=dispatch - tail * width, first=first, last=last, width=width,
                  head_s=head * width, tail_s=tail * width), ""


def steady_summary(results: list[RequestResult], window: Window) -> tuple[RunSummary, RunSummary]:
    """(latencies: requests started in the window, throughputs: requests ended in it), both over its duration."""
    span = (window.start, window.end)
    return summarize(window.started_in(results), span), summarize(window.ended_in(results), span)


def _figure(column: str, latency: RunSummary, delivered: RunSummary):
    source = delivered if column in THROUGHPUTS else latency
    return source.flat().get(column)


@dataclass
class SteadyRow(Record):
    """One cell's steady window (seconds from its first request; None with the ``reason`` there is none), its
    figures (:data:`COMPARED`) over the whole run and over the window, and their intervals."""

    point: Point
    repeat: int
    name: str  # as the table names the cell
    measured_requests: int
    reason: str = ""
    window_start_s: Number = None
    window_end_s: Number = None
    span_s: Number = None
    window_requests: int | None = None
    share_pct: Number = None
    whole_values: dict[str, Number] = field(default_factory=dict)
    steady_values: dict[str, Number] = field(default_factory=dict)
    whole: dict[str, Interval] = field(default_factory=dict)
    steady: dict[str, Interval] = field(default_factory=dict)

    def record(self) -> dict:
        """The CSV's columns (:data:`STEADY_COLUMNS`)."""
        out = {**self.point.record(), "repeat": self.repeat, "window_start_s": self.window_start_s,
               "window_end_s": self.window_end_s, "span_s": self.span_s, "window_requests": self.window_requests,
               "measured_requests": self.measured_requests, "share_pct": self.share_pct, "reason": self.reason}
        for column in COMPARED:
            out[f"whole_{column}"] = self.whole_values.get(column)
            out[f"steady_{column}"] = self.steady_values.get(column)
        return out


def cell_steady(data, key: tuple, name: str | None = None) -> SteadyRow:
    """One row: the cell's identity, its window and its figures, whole-run and steady, with intervals."""
    cell = data.cell
    measured = data.measured
    window, reason = find_window(data.results)
    row = SteadyRow(cell.point, cell.repeat, name or cell.point.label, len(measured), reason)
    for column in COMPARED:
        row.whole_values[column] = data.summary.flat().get(column) if data.summary else None
    if window is None:
        return row
    latency, delivered = steady_summary(data.results, window)
    inside = window.started_in(measured)
    row.window_start_s, row.window_end_s = window.start - window.first, window.end - window.first
    row.span_s, row.window_requests = window.last - window.first, len(inside)
    row.share_pct = 100.0 * len(inside) / len(measured) if measured else None
    started = cell_intervals(Requests(inside, window.duration), ("steady",) + key)
    ended = cell_intervals(Requests(window.ended_in(measured), window.duration), ("steady-end",) + key)
    for column in COMPARED:
        row.steady_values[column] = _figure(column, latency, delivered)
        iv = (ended if column in THROUGHPUTS else started).get(column)
        if iv is not None:
            row.steady[column] = iv
    return row


def steady_rows(run: RunData, whole_rows: list | None = None) -> list[SteadyRow]:
    """One row per ok cell with a raw log; ``whole_rows`` (the report's cell rows, :class:`reports.rows.Row`,
    same order) lend their intervals to the whole-run figures."""
    rows = []
    for i, data in enumerate(run.cells):
        if not data.ok or not data.results:
            continue
        cell = data.cell
        row = cell_steady(data, cell.key + (cell.phase,))
        if whole_rows is not None:
            row.whole = {c: iv for c, iv in whole_rows[i].estimates.intervals.items() if c in COMPARED}
        rows.append(row)
    return rows


def _plain(column: str, value, iv) -> str | None:
    """``value [low, high]`` in shown units (the CLI's rendering; the report passes its own)."""
    text = shown(column, value)
    if text is not None and iv is not None and iv.has_interval:
        text += f" [{shown(column, iv.low)}, {shown(column, iv.high)}]"
    return text


def window_text(row: SteadyRow) -> str:
    """``2.0-14.1 s of 14.6`` (seconds from the cell's first request), or why there is none."""
    if row.window_start_s is None:
        return row.reason or "none"
    return f"{number(row.window_start_s)}-{number(row.window_end_s)} s of {number(row.span_s)}"


def steady_table(rows: list[SteadyRow], text=_plain) -> Table:
    """The window, the share of requests in it, each figure whole-run and steady.

    ``text(column, value, interval)`` renders one figure (the report passes its interval renderer).
    """
    cells = any(r.repeat for r in rows)
    body = []
    for r in rows:
        name = r.name + (f" rep {r.repeat}" if cells and r.repeat else "")
        line = [name, window_text(r),
                None if r.window_requests is None else
                f"{r.window_requests} of {r.measured_requests} ({r.share_pct:.0f} %)"]
        for column in COMPARED:
            line.append(text(column, r.whole_values.get(column), r.whole.get(column)))
            line.append(text(column, r.steady_values.get(column), r.steady.get(column)))
        body.append(line)
    headers = ["cell", "steady window", "requests in it"]
    for column in COMPARED:
        headers += [f"{title(column)} (run)", f"{title(column)} (steady)"]
    return Table(headers, body)


def table(rows: list[SteadyRow], text=_plain) -> str:
    """The Markdown table of :func:`steady_table`."""
    return steady_table(rows, text).markdown()


NOTE = ("Each cell's steady window leaves out ramp-up and drain: it ends at the last dispatch and starts where "
        "both the in-flight count and the output-token throughput settled (MSER-5 truncation, White 1997, on "
        "each series in equal time bins). Latencies over the requests that started in the window, throughputs "
        "over those that ended in it, per second of the window; `(run)` is the whole cell, as in the tables "
        "above (docs/statistics.md).")


TITLE = "Steady state"


def parts(rows: list[SteadyRow], text=_plain) -> list[Part]:
    """The section's paragraphs and table (nothing when no cell has a raw log)."""
    return [NOTE, steady_table(rows, text)] if rows else []


def lines(rows: list[SteadyRow], text=_plain) -> list[str]:
    """The report's section as Markdown lines."""
    return markdown_section(TITLE, parts(rows, text)) if rows else []


# --------------------------------------------------------------------------- the command


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m reports.steady",
                                description="Find the steady window of raw per-request logs (ramp-up and drain "
                                            "left out) and print the figures over it beside the whole run's.")
    p.add_argument("raw_logs", nargs="+", metavar="RAW_LOG", help="a raw per-request log (*_requests.jsonl)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = []
    for path in args.raw_logs:
        try:
            results = read_results(path)
        except (OSError, ValueError) as exc:
            return print_error(f"{path}: {getattr(exc, 'strerror', None) or exc}")
        name = str(path).removesuffix("_requests.jsonl")
        data = CellData(cell=Cell(server=name, task="", mode="", concurrency=0, prefix=name), results=results,
                        summary=summarize(results) if results else None, status="ok")
        rows.append(cell_steady(data, (name,), name))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
