"""Latency histograms with fixed bucket edges, per task: an additive part of the live board, for Prometheus.

Counted where each result is measured and added on a master like the board's
other additive parts (bucket counts add up), so a scrape reads exact counts
whatever the number of workers. Kept only where the export is on
(``--prometheus-port``): the inter-token gaps cost one bucket look-up per token.

Edges (seconds, upper bounds inclusive as Prometheus's ``le``) are chosen for
LLM serving: TTFT from 5 ms (a warm cache on a GPU) to a minute (a long queue),
finer between 50 ms and 2 s where interactive targets lie; TPOT and ITL from
1 ms to 2.5 s, finer between 5 and 100 ms (10-200 tokens/s per stream); E2E
from 50 ms to 10 minutes; dispatch lag from 0.5 ms (the scheduling noise of a
quiet client) to 10 s. Where the buckets are too coarse for a quantile, the
summary's sketches give it within 1 % (docs/prometheus.md).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from llmload.core.metrics import RequestMetrics

#: Bucket upper bounds (seconds) per metric of :class:`~llmload.core.metrics.RequestMetrics`.
EDGES: dict[str, tuple[float, ...]] = {
    "ttft": (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5,
             10.0, 15.0, 20.0, 30.0, 60.0),
    "tpot": (0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
             0.5, 0.75, 1.0, 2.5),
    "e2e": (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
            120.0, 180.0, 300.0, 600.0),
    "dispatch_lag": (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
}
EDGES["itl"] = EDGES["tpot"]
#: Gaps of one request from which numpy counts them faster than a loop of look-ups.
VECTOR_FROM = 32
_ARRAYS = {name: np.asarray(edges) for name, edges in EDGES.items()}


@dataclass
class Histogram:
    """Counts per bucket of one metric (the last: above every edge), and the sum of the values."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self):
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, value: float) -> None:
        self.counts[bisect_left(self.edges, value)] += 1
        self.total += value

    def add_many(self, values, edges_array: np.ndarray) -> None:
        if len(values) < VECTOR_FROM:
            for value in values:
                self.add(value)
            return
        found = np.bincount(np.searchsorted(edges_array, values, side="left"), minlength=len(self.counts))
        self.counts = [a + int(b) for a, b in zip(self.counts, found)]
        self.total += float(np.sum(values))

    def merge(self, other: "Histogram") -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]
        self.total += other.total

    def cumulative(self) -> list[tuple[str, int]]:
        """``[(le, count of values <= le), ..., ("+Inf", count)]`` as Prometheus's buckets."""
        out, running = [], 0
        for edge, count in zip(self.edges + (float("inf"),), self.counts):
            running += count
            out.append(("+Inf" if edge == float("inf") else repr(edge), running))
        return out


def _histograms() -> dict[str, Histogram]:
    return {name: Histogram(edges) for name, edges in EDGES.items()}


@dataclass
class TaskHistograms:
    """One task's histograms: TTFT, TPOT, ITL (one value per gap), E2E and dispatch lag of successful requests."""

    metrics: dict[str, Histogram] = field(default_factory=_histograms)

    def add(self, metrics: RequestMetrics) -> None:
        for name, histogram in self.metrics.items():
            if name == "itl":
                if metrics.itl:
                    histogram.add_many(metrics.itl, _ARRAYS["itl"])
                continue
            value = getattr(metrics, name)
            if value is not None:
                histogram.add(max(value, 0.0))

    def merge(self, other: "TaskHistograms") -> None:
        for name, histogram in other.metrics.items():
            self.metrics[name].merge(histogram)

    def to_wire(self) -> dict:
        return {name: {"counts": h.counts, "sum": h.total} for name, h in self.metrics.items() if h.count}

    @classmethod
    def from_wire(cls, data: dict) -> "TaskHistograms":
        found = cls()
        for name, part in data.items():
            if name in found.metrics:
                found.metrics[name] = Histogram(EDGES[name], list(part["counts"]), part["sum"])
        return found
