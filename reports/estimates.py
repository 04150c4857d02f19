"""Intervals of the report's figures: each summary column as a :class:`~llmload.core.stats.Statistic`.

A set of requests (one cell, or the repeats of one cell pooled) becomes one
statistic per column of :func:`llmload.core.metrics.summary_columns`: every
distribution's statistics, and the throughputs through the effective-concurrency
estimator (``docs/statistics.md``). Requests are in start-time order (the blocks
of the within-run bootstrap are consecutive requests); units are request indices
for a cell's own intervals and prompt occurrences (``prompt#k``, the k-th time a
prompt was sent) for the paired ratios between servers or runs. A calibration's
spreads widen a single run's intervals; with repeats, Student's t over the
repeats' figures covers both levels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from llmload.core.calibration import Spread
from llmload.core.metrics import METRICS, RequestResult, request_metrics, summarize
from llmload.core.stats import (Interval, Statistic, block_ratio_interval, combined_spread, intervals, ratio_interval,
                                repeat_interval, repeat_ratio_interval, widened)
from reports.records import NOT_SAVED

#: Run-level figures that get an interval (counts and the wall time do not: they are what was done).
ESTIMATED_FIGURES = ("request_throughput", "output_token_throughput", "slo_attainment", "goodput")
RATES = {"request_throughput", "output_token_throughput", "goodput"}


def estimated(column: str) -> bool:
    """Whether ``column`` carries ``_ci_low``/``_ci_high`` columns."""
    if column in ESTIMATED_FIGURES:
        return True
    name, _, stat = column.rpartition("_")
    return any(m.name == name for m in METRICS) and stat != "max"


@dataclass
class Requests:
    """The measured requests of a cell (or of pooled cells) as arrays, ready to become statistics."""

    measured: list[RequestResult]
    duration_s: float  # summed over pooled cells

    def __post_init__(self) -> None:
        self.measured = sorted(self.measured, key=lambda r: r.start_time)  # time order: blocks are consecutive
        ok = [(i, r) for i, r in enumerate(self.measured) if r.success]
        self.ok_index = np.array([i for i, _ in ok], dtype=int)
        self.metrics = [request_metrics(r) for _, r in ok]
        sent: dict[str, int] = {}
        occurrences = []
        for i, r in enumerate(self.measured):
            prompt = r.prompt_id or f"#{i}"
            occurrences.append(f"{prompt}#{sent.get(prompt, 0)}")
            sent[prompt] = sent.get(prompt, 0) + 1
        self.prompts = np.array(occurrences, dtype=str)  # the unit a ratio pairs on, in time order
        self.e2e = np.array([m.e2e for m in self.metrics], dtype=float)
        self.tokens = np.array([m.output_tokens for m in self.metrics], dtype=float)
        slo = [r.slo_ok for r in self.measured]
        self.has_slo = any(s is not None for s in slo)
        self.slo_all = np.array([bool(s) for s in slo], dtype=float)
        failed = [(i, request_metrics(r)) for i, r in enumerate(self.measured) if r.failed]
        self.values: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for metric in METRICS:
            vals, owners = [], []
            for i, m in (failed if metric.of_failures else zip(self.ok_index, self.metrics)):
                got = metric.values(m)
                vals.extend(got)
                owners.extend([i] * len(got))
            self.values[metric.name] = (np.asarray(vals, dtype=float), np.asarray(owners, dtype=int))

    def units(self, owners: np.ndarray, by: str) -> np.ndarray:
        return owners if by == "request" else self.prompts[owners]

    def statistics(self, by: str = "request") -> dict[str, Statistic]:
        """One statistic per estimated column; ``by``: ``request`` (a cell's intervals) or ``prompt`` (pairs)."""
        out: dict[str, Statistic] = {}
        order = None if by == "request" else self.prompts  # request indices are in time order already
        concurrency = float(self.e2e.sum()) / self.duration_s if self.duration_s > 0 else 0.0
        if self.e2e.size and concurrency > 0:
            units = self.units(self.ok_index, by)
            out["request_throughput"] = Statistic("rate", np.ones_like(self.e2e), units, self.e2e, concurrency,
                                                  order)
            out["output_token_throughput"] = Statistic("rate", self.tokens, units, self.e2e, concurrency, order)
            if self.has_slo:
                met = self.slo_all[self.ok_index]
                out["goodput"] = Statistic("rate", met, units, self.e2e, concurrency, order)
        if self.has_slo and self.measured:
            out["slo_attainment"] = Statistic("mean", 100.0 * self.slo_all,
                                              self.units(np.arange(len(self.measured)), by), order=order)
        for metric in METRICS:
            values, owners = self.values[metric.name]
            if values.size == 0:
                continue
            units = self.units(owners, by)
            for stat in metric.stats:
                out[metric.column(stat)] = Statistic(stat, values, units, order=order)
        return out

    def counts(self) -> dict[str, int]:
        """``<metric>_n``: how many values each distribution holds."""
        return {f"{m.name}_n": int(self.values[m.name][0].size) for m in METRICS}


def requests_of(cells) -> Requests:
    """The pooled measured requests of ``cells`` (CellData with results and a summary)."""
    measured: list[RequestResult] = []
    duration = 0.0
    for c in cells:
        measured.extend(c.measured)
        duration += c.summary.duration_s if c.summary else 0.0
    return Requests(measured, duration)


def cell_intervals(requests: Requests, key: tuple, blocks: bool = True) -> dict[str, Interval]:
    """Every estimated column of one set of requests with its within-run interval (``blocks=False``: the
    bootstrap of independent requests, the method before blocks)."""
    return intervals(requests.statistics("request"), key=("cell",) + tuple(key), blocks=blocks)


def calibrated(found: dict[str, Interval], spreads: dict[str, Spread] | None, runs: int = 1
               ) -> dict[str, Interval]:
    """Intervals of ``runs`` runs' requests widened by the run-to-run spread of each figure the calibration has
    (divided by ``sqrt(runs)``: the pooled requests of several runs vary less from run to run)."""
    if not spreads:
        return found
    return {column: widened(iv, spreads[column].sd / runs ** 0.5, spreads[column].df,
                            within=spreads[column].within / runs ** 0.5) if column in spreads else iv
            for column, iv in found.items()}


@dataclass
class Estimates:
    """The figures of a cell, or of a point's repeats pooled: each column's value and, where it is estimated, its
    :class:`~llmload.core.stats.Interval` (value, low, high, n, what it covers); the requests they rest on (None:
    nothing to pair a ratio on); the repeats' own estimates (a single cell: itself)."""

    values: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, Interval] = field(default_factory=dict)
    requests: Requests | None = field(default=None, metadata=NOT_SAVED)
    repeats: list["Estimates"] = field(default_factory=list)
    block: int | None = None  # a cell's block of the interleaved order (None: a sequential run, or pooled repeats)

    def value(self, column: str):
        return self.values.get(column)

    def interval(self, column: str) -> Interval | None:
        return self.intervals.get(column)

    def columns(self) -> dict[str, Any]:
        """The values with ``<column>_ci_low``/``_ci_high``/``_ci_covers`` of each interval: the CSV's columns."""
        out = dict(self.values)
        for column, iv in self.intervals.items():
            out[f"{column}_ci_low"], out[f"{column}_ci_high"] = iv.low, iv.high
            out[f"{column}_ci_covers"] = iv.covers if iv.has_interval else None
        return out


def repeat_values(repeats: list[Estimates], column: str) -> list[float] | None:
    """The figure of each repeat (from its interval), None unless 2+ repeats all have one."""
    if len(repeats) < 2:
        return None
    values = [e.interval(column) for e in repeats]
    if any(iv is None or iv.value is None for iv in values):
        return None
    return [iv.value for iv in values]


def block_values(repeats: list[Estimates], values: list[float] | None) -> dict[int, float] | None:
    """The repeats' figures ``values`` (:func:`repeat_values`) by the block of the interleaved order each ran in,
    None unless there are values and every repeat has a block of its own (a sequential run's cells have none)."""
    blocks = [e.block for e in repeats]
    if not values or any(b is None for b in blocks) or len(set(blocks)) < len(blocks):
        return None
    return dict(zip(blocks, values))


def repeat_intervals(repeats: list[Estimates], columns) -> dict[str, Interval]:
    """Each column the repeats all have, as the mean over repeats with Student's t interval (across repeats)."""
    out = {}
    for column in columns:
        values = repeat_values(repeats, column)
        if values:
            out[column] = repeat_interval(values)
    return out


def ratio_intervals(top: Estimates, bottom: Estimates, columns, key: tuple,
                    spreads: tuple[dict[str, Spread] | None, dict[str, Spread] | None] = (None, None),
                    by_block: bool = False) -> dict[str, tuple[Interval, str]]:
    """``top / bottom`` of each column with its interval and how it was made.

    With 2+ repeats on both sides: with ``by_block`` (both ran in one interleaved run) and 2+ blocks both ran a
    repeat in, Student's t over each block's ratio (``paired repeats``); else Welch's t over the repeats' figures
    (``repeats``). Otherwise the block bootstrap over the prompt occurrences both answered (``paired``;
    ``unpaired`` where they share none), widened by both sides' calibrated run-to-run
    spreads where both have one for the figure (``spreads``: per side, figure ->
    :class:`~llmload.core.calibration.Spread`), else within-run only.
    """
    tops = bottoms = None  # the requests' statistics, made when a column first needs them
    out = {}
    draws: dict = {}  # one draw of the shared prompt occurrences per block length for every column
    for column in columns:
        per_top, per_bottom = repeat_values(top.repeats, column), repeat_values(bottom.repeats, column)
        in_blocks = ((block_values(top.repeats, per_top), block_values(bottom.repeats, per_bottom)) if by_block
                     else (None,))
        if all(in_blocks) and len(set(in_blocks[0]) & set(in_blocks[1])) >= 2:
            out[column] = (block_ratio_interval(*in_blocks), "paired repeats")
            continue
        if per_top and per_bottom:
            out[column] = (repeat_ratio_interval(per_top, per_bottom), "repeats")
            continue
        if top.requests is None or bottom.requests is None:
            continue  # no requests to pair (a saved report without its raw logs)
        if tops is None:
            tops, bottoms = top.requests.statistics("prompt"), bottom.requests.statistics("prompt")
        if column in tops and column in bottoms:
            iv, paired = ratio_interval(tops[column], bottoms[column], key=("ratio",) + tuple(key), draws=draws)
            sides = [s.get(column) if s else None for s in spreads]
            if all(sides):
                iv = widened(iv, *combined_spread(*((s.sd, s.df) for s in sides)))
            out[column] = (iv, "paired" if paired else "unpaired")
    return out


def pooled_summary(cells):
    """``summarize`` of the pooled requests (distributions of all repeats together)."""
    results: list[RequestResult] = []
    for c in cells:
        results.extend(c.results)
    return summarize(results)
