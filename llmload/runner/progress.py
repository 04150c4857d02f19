"""The runner's progress: one line per cell, with an overall count and an estimate of the time left.

    [12/96] basic-batched qa stream c=8: 8 req, 0 failed, E2E p50 812 ms, TTFT p50 95 ms, 52.1 tok/s (9s); about 14 min left

The estimate (:meth:`Progress.time_left`) is the mean wall time of the cells
run so far times the cells left, plus the mean server start-up so far times
the start-ups still expected. A level under ``--target-ci`` counts as its most
repeats and a capacity search as its most cells until they end, so the total
can shrink.
"""

from __future__ import annotations

from llmload.core.metrics import RunSummary
from llmload.core.points import TRACE_PHASE
from llmload.core.runfiles import ERROR_RATE, Cell


def cell_label(cell: Cell, repeats: int = 1) -> str:
    """``basic-batched qa stream c=8``, with the phase and the repeat where they tell cells apart."""
    point = cell.point
    load = f"trace pool={point.load.concurrency}" if point.phase == TRACE_PHASE else point.load.describe()
    label = f"{point.server} {point.task} {point.mode} {load}"
    if point.phase in ("sweep", "capacity") and point.load.closed:
        label += " (saturation)"
    elif cell.phase == "capacity":
        label += " (capacity" + (f", look {cell.repeat + 1})" if cell.repeat else ")")
    if repeats > 1 and cell.phase != "capacity":
        label += f" #{cell.repeat + 1}"
    return label


def _ms(summary: RunSummary, metric: str, stat: str, title: str) -> str:
    value = summary.get(metric, stat)
    return "" if value is None else f", {title} {value * 1000:.0f} ms"


def figures(cell: Cell, summary: RunSummary | None, throughput_only: bool = False) -> str:
    """What a finished cell measured, in one line (or its status and error)."""
    if summary is None or cell.status not in ("ok", "interrupted", ERROR_RATE):
        return f"{cell.status.upper()}: {cell.error} ({cell.wall_s:.0f}s)"
    text = f"{summary.requests} req, {summary.failures} failed"
    if summary.cancelled is not None:
        text += f", {summary.cancelled} cancelled"
    if throughput_only:
        text += f", {summary.request_throughput:.2f} req/s"
    else:
        text += _ms(summary, "e2e", "p50", "E2E p50") + _ms(summary, "ttft", "p50", "TTFT p50")
    text += f", {summary.output_token_throughput:.1f} tok/s"
    if summary.slo_attainment is not None:
        text += f", SLO met {summary.slo_attainment:.1f} %"
    lag = summary.get("dispatch_lag", "p99")
    if lag is not None:
        text += f", lag p99 {lag * 1000:.0f} ms"
    text += f" ({cell.wall_s:.0f}s)"
    if cell.status in ("interrupted", ERROR_RATE):
        text += f"; {cell.status.upper()}: {cell.error}"
    return text


def duration_text(seconds: float) -> str:
    """``40 s``, ``14 min``, ``2 h 05 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """Counts cells and server start-ups and estimates the time left (see the module docstring)."""

    def __init__(self, total_cells: int, starts: int):
        self.total = total_cells
        self.done = 0
        self.starts_left = starts
        self.cell_seconds: list[float] = []
        self.start_seconds: list[float] = []

    def counter(self) -> str:
        """``[12/96]``: the cell about to run (or just run) and the total."""
        return f"[{min(self.done + 1, self.total)}/{self.total}]"

    def server_started(self, seconds: float) -> None:
        self.start_seconds.append(seconds)
        self.starts_left = max(0, self.starts_left - 1)

    def expect_starts(self, starts: int) -> None:
        """Server start-ups still expected (the runner's estimate, given its order)."""
        self.starts_left = max(0, starts)

    def cell_done(self, seconds: float | None) -> None:
        """One cell finished (``seconds`` of wall time) or was skipped (None)."""
        self.done += 1
        if seconds is not None:
            self.cell_seconds.append(seconds)

    def shrink(self, cells: int) -> None:
        """``cells`` planned cells will not run (a level converged, a search ended early); negative: more will."""
        self.total = max(self.done, self.total - cells)

    def time_left(self) -> float | None:
        """Seconds left by the estimate; None before any cell has run."""
        if not self.cell_seconds:
            return None
        per_cell = sum(self.cell_seconds) / len(self.cell_seconds)
        per_start = sum(self.start_seconds) / len(self.start_seconds) if self.start_seconds else 0.0
        return per_cell * (self.total - self.done) + per_start * self.starts_left

    def left_text(self) -> str:
        left = self.time_left()
        if self.done >= self.total:
            return "done"
        return "time left unknown" if left is None else f"about {duration_text(left)} left"
