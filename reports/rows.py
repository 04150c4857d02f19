"""The report's rows, computed once from a run: one per cell, one per load point (its repeats pooled), and ratios.

A :class:`Row` is a load point (:class:`~llmload.core.points.Point`), its status,
its :class:`~reports.estimates.Estimates` (every figure from the metric catalogue:
``summarize`` on the raw log, its interval from :mod:`llmload.core.stats`, widened
by a calibration's run-to-run spreads where there is one) and what else the
summary shows of it (token sources, the client-error bound, resource peaks).
:meth:`Row.record` is its CSV row. A :class:`Ratio` is one figure of two rows,
``top / bottom``, with its interval. :mod:`reports.merge`, :mod:`reports.compare`,
the sections, the plots and the runner's ``--target-ci`` all read these.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from llmload.core.calibration import Calibration
from llmload.core.clienterror import figures_of, flags
from llmload.core.metrics import RunSummary, headline_columns, ratio
from llmload.core.points import Point
from llmload.core.stats import Interval
from reports.calibrate import spreads_for
from reports.records import NOT_SAVED
from reports.estimates import (Estimates, calibrated, cell_intervals, pooled_summary, ratio_intervals,
                               repeat_intervals, requests_of)
from reports.run import CellData, RunData

#: Columns compared between servers: the throughputs and the headline latency statistics.
RATIO_COLUMNS = [c for c in headline_columns()
                 if c in ("request_throughput", "output_token_throughput")
                 or c.rpartition("_")[0] in ("e2e", "ttft", "tpot", "tokens_per_s")]


@dataclass
class Row:
    """One row of the summary: a cell (``repeat``: its index) or a point's repeats pooled (``repeat`` None)."""

    point: Point
    status: str
    repeat: int | None
    estimates: Estimates
    other: dict[str, Any] = field(default_factory=dict)  # error, token sources, client error, peaks, repeats

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def interval(self, column: str) -> Interval | None:
        return self.estimates.interval(column)

    def get(self, column: str, default=None):
        """The value of one of :meth:`record`'s columns."""
        if column in ("server", "task", "mode", "concurrency", "rate", "phase"):
            return self.point.record()[column]
        if column in ("repeat", "status"):
            return getattr(self, column)
        if column in self.estimates.values:
            return self.estimates.values[column]
        if column in self.other:
            return self.other[column]
        base, _, part = column.rpartition("_ci_")
        iv = self.estimates.interval(base) if part in ("low", "high", "covers") else None
        if iv is not None:
            return {"low": iv.low, "high": iv.high, "covers": iv.covers if iv.has_interval else None}[part]
        return default

    def record(self) -> dict[str, Any]:
        """The row as the summary CSV's columns."""
        return {**self.point.record(), "repeat": self.repeat, "status": self.status, **self.estimates.columns(),
                **self.other}


@dataclass
class Ratio:
    """``top / bottom`` of one figure with its interval and how it was made (``repeats``, ``paired``, ...)."""

    metric: str
    value: float | None
    interval: Interval
    method: str
    record: dict[str, Any]  # the CSV's columns
    top: Any = field(default=None, metadata=NOT_SAVED)  # what was compared: two rows, or two capacity searches
    bottom: Any = field(default=None, metadata=NOT_SAVED)  # (a saved report names them by index)

    def get(self, column: str, default=None):
        return self.record.get(column, default)


def ratio_record(iv: Interval, method: str) -> dict[str, Any]:
    """A ratio's interval columns."""
    return {"ci_low": iv.low, "ci_high": iv.high, "covers": iv.covers if iv.has_interval else None,
            "significant": iv.significant, "pairs": iv.n, "method": method}


def ratios_of(top: Row, bottom: Row, columns, key: tuple, calibration: Calibration | None, by_block: bool = False
              ) -> dict[str, tuple[float | None, Interval, str]]:
    """``top / bottom`` of each of ``columns`` both rows measured: (value, interval, method) by
    :func:`~reports.estimates.ratio_intervals`, the value the ratio of the two figures where the interval has
    none; ``by_block``: the rows are of one run, whose repeats pair by the block they ran in."""
    found = ratio_intervals(top.estimates, bottom.estimates, columns, key,
                            (spreads_for(calibration, top.point), spreads_for(calibration, bottom.point)), by_block)
    out = {}
    for column in columns:
        if column not in found or top.get(column) is None or bottom.get(column) is None:
            continue  # not measured in this mode
        iv, method = found[column]
        out[column] = (iv.value if iv.value is not None else ratio(top.get(column), bottom.get(column)), iv, method)
    return out


def client_error(cells: list[CellData], summary: RunSummary | None) -> dict:
    """``client_error_ms`` (the largest bound its runs stated of themselves) and ``client_error_flags`` (the exact
    figures of ``summary``, TTFT p50 and ITL mean, it passes 5 % of) of a cell or a point's repeats."""
    bounds = [c.client_error["bound_ms"] for c in cells if c.client_error]
    if not bounds:
        return {}
    bound = max(bounds)
    found = flags(bound / 1000.0, figures_of(summary)) if summary is not None else []
    return {"client_error_ms": bound, "client_error_flags": ",".join(found) or None}


def token_source(cells: list[CellData], field: str = "output_tokens_source") -> str | None:
    """Where the output token counts (``field``: or each chunk's, ``chunk_tokens_source``) came from: ``usage``,
    ``tokenizer``, ``chunks``, ``none``, or a mix with counts."""
    counts: dict[str, int] = {}
    for data in cells:
        for r in data.measured:
            if r.success:
                counts[getattr(r, field)] = counts.get(getattr(r, field), 0) + 1
    if not counts:
        return None
    if len(counts) == 1:
        return next(iter(counts))
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def cell_row(data: CellData, calibration: Calibration | None = None) -> Row:
    """One cell's row: figures from the raw log with their intervals (widened by the calibration's run-to-run
    spreads where it has them), resource peaks."""
    cell = data.cell
    other = {"error": data.error, "locust_requests": data.locust_requests, "token_source": token_source([data]),
             "chunk_token_source": token_source([data], "chunk_tokens_source")}
    estimates = Estimates(block=cell.block)
    if data.summary is not None:
        requests = requests_of([data])
        estimates.values.update(data.summary.flat())
        estimates.values.update(requests.counts())
        found = cell_intervals(requests, cell.key + (cell.phase,))
        estimates.intervals.update(calibrated(found, spreads_for(calibration, cell.point)))
        estimates.requests = requests if data.ok else None
    other.update(client_error([data], data.summary))
    other.update(data.peaks)
    return Row(cell.point, data.status, cell.repeat, estimates, other)


def group_row(point: Point, cells: list[CellData], rows: dict[int, Row], calibration: Calibration | None = None
              ) -> Row:
    """One row per load point (a single cell's row where there is one). With repeats: each figure every repeat
    has, as the mean over repeats with Student's t interval (across repeats); the others (a p99 only the pooled
    requests can give) from all their requests pooled, with the pooled within-run interval."""
    ok = [c for c in cells if c.ok and c.summary is not None]
    if len(ok) <= 1:
        row = rows[id(ok[0] if ok else cells[0])]
        estimates = replace(row.estimates, repeats=[row.estimates] if ok else [])
        return replace(row, estimates=estimates, other={**row.other, "repeats": len(ok)})
    requests = requests_of(ok)
    pooled = pooled_summary(ok)
    duration = sum(c.summary.duration_s for c in ok)  # the repeats' wall times, not the span between them
    estimates = Estimates({**pooled.flat(), "duration_s": duration, **requests.counts()}, requests=requests,
                          repeats=[rows[id(c)].estimates for c in ok])
    estimates.intervals.update(calibrated(cell_intervals(requests, ("group",) + point.key),
                                          spreads_for(calibration, point), len(ok)))
    for column, iv in repeat_intervals(estimates.repeats, list(estimates.intervals)).items():
        estimates.values[column] = iv.value
        estimates.intervals[column] = iv
    other = {"error": ok[0].error, "repeats": len(ok), "token_source": token_source(ok),
             "chunk_token_source": token_source(ok, "chunk_tokens_source"),
             "locust_requests": sum(c.locust_requests or 0 for c in ok), **client_error(ok, pooled)}
    for column in ok[0].peaks:
        values = [c.peaks.get(column) for c in ok if c.peaks.get(column) is not None]
        pick = (lambda v: sum(v) / len(v)) if column.startswith("mean_") else max
        other[column] = pick(values) if values else None
    return Row(point, ok[0].status, None, estimates, other)


def run_rows(run: RunData, calibration: Calibration | None = None) -> tuple[list[Row], list[Row]]:
    """(one row per cell, one row per load point with its repeats pooled) of a run, with their intervals."""
    by_cell = {id(data): cell_row(data, calibration) for data in run.cells}
    groups = [group_row(point, cells, by_cell, calibration) for point, cells in run.groups().items()]
    return [by_cell[id(d)] for d in run.cells], groups


def write_csv(path: Path, rows: list, columns: list[str]) -> Path:
    """``rows`` (dicts, or anything with a ``record``) as a CSV of ``columns``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            record = getattr(row, "record", row)
            writer.writerow(record() if callable(record) else record)
    return path
