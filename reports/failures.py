"""The report's failures section: per cell, its failures by class, their own latencies, and its retries.

One :class:`FailureRow` per cell that had a failure or a retry (or that its load
generator stopped early at ``--max-error-rate``: status ``error-rate``), from
the cell's row (:mod:`reports.rows`), whose figures the metric catalogue made
(:func:`llmload.core.metrics.summarize`: ``failed_<class>``, ``failure_pct``,
``failure_latency``, ``retried``, ``attempts``, ``retry_ok``, ``retry_wait_s``).
Every latency of the other tables is of successful requests only; this section
shows the failures' apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmload.core.metrics import FAILURE_CLASSES
from llmload.core.points import Point
from reports.format import Part, Table, markdown_section, number
from reports.records import Number, Record
from reports.rows import Row

TITLE = "Failures and retries"
RETRY_FIGURES = ("retried", "attempts", "retry_ok", "retry_wait_s")
LATENCY = ("failure_latency_p50", "failure_latency_p99")
FAILURE_COLUMNS = (["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "status", "requests",
                    "failures", "failure_pct"] + [f"failed_{name}" for name in FAILURE_CLASSES]
                   + list(LATENCY) + list(RETRY_FIGURES))
NOTE = ("Failed requests by class, from each one's status code and the client's flags (docs/metrics.md, "
        "\"Failures\"). They count as misses in the SLO attainment and the goodput and are left out of every "
        "other latency and of the throughputs; their own latency, first send to the error, is here. A retried "
        "request (--retry) is one request, its latency from its first send, the waits included. `error-rate`: the "
        "load generator stopped the cell early at --max-error-rate (its figures are kept; it is in no ratio).")


@dataclass
class FailureRow(Record):
    """One cell's failures by class, their latencies (s) and its retries."""

    point: Point
    repeat: int | None
    status: str
    requests: Number
    failures: Number
    failure_pct: Number
    classes: dict[str, int] = field(default_factory=dict)  # failure class -> requests (FAILURE_CLASSES)
    failure_latency_p50: Number = None
    failure_latency_p99: Number = None
    retried: Number = None
    attempts: Number = None
    retry_ok: Number = None
    retry_wait_s: Number = None

    def record(self) -> dict:
        return {**self.point.record(), "repeat": self.repeat, "status": self.status, "requests": self.requests,
                "failures": self.failures, "failure_pct": self.failure_pct,
                **{f"failed_{name}": self.classes.get(name, 0) for name in FAILURE_CLASSES},
                **{column: getattr(self, column) for column in LATENCY + RETRY_FIGURES}}


def failure_rows(rows: list[Row]) -> list[FailureRow]:
    """A row per cell (of ``rows``, the report's cell rows) with a failure, a retry, or the status error-rate."""
    out = []
    for row in rows:
        if not row.get("failures") and not row.get("retried") and row.status != "error-rate":
            continue
        out.append(FailureRow(row.point, row.repeat, row.status, row.get("requests"), row.get("failures"),
                              row.get("failure_pct"),
                              {name: row.get(f"failed_{name}") or 0 for name in FAILURE_CLASSES},
                              **{column: row.get(column) for column in LATENCY + RETRY_FIGURES}))
    return out


def table(rows: list[FailureRow]) -> Table:
    """Cells by their failures: the classes met, the failures' latencies, the retries where there were."""
    classes = [name for name in FAILURE_CLASSES if any(r.classes.get(name) for r in rows)]
    retries = any(r.retried for r in rows)
    headers = (["cell", "status", "requests", "failed", "failed %"] + [FAILURE_CLASSES[c][0] for c in classes]
               + ["failure latency p50 ms", "p99 ms"]
               + (["retried", "attempts", "ok after retry", "retry wait s"] if retries else []))

    def ms(value) -> str | None:
        return None if value is None else number(value * 1000.0)

    body = []
    for r in rows:
        line = [r.point.label + (f" repeat {r.repeat}" if r.repeat else ""), r.status, r.requests, r.failures,
                None if r.failure_pct is None else number(r.failure_pct)]
        line += [r.classes.get(c, 0) for c in classes]
        line += [ms(r.failure_latency_p50), ms(r.failure_latency_p99)]
        if retries:
            line += [r.retried, r.attempts, r.retry_ok, None if r.retry_wait_s is None else number(r.retry_wait_s)]
        body.append(line)
    return Table(headers, body)


def parts(rows: list[FailureRow]) -> list[Part]:
    """The section's note and table (nothing where no cell failed or retried)."""
    return [NOTE, table(rows)] if rows else []


def lines(rows: list[FailureRow]) -> list[str]:
    """The section as Markdown lines."""
    return markdown_section(TITLE, parts(rows)) if rows else []
