"""The client's own timing error: what one process measured of its event loop and CPU, and the bound it implies.

Every process that stamps requests (a standalone run, each worker of a
distributed one) runs a probe (:mod:`llmload.loadgen.clock`) that wakes every
:data:`PROBE_INTERVAL_S` and, while requests are in flight, records one
*delay*: from the moment it was due to the end of the event-loop pass it woke
in. A chunk that reached the socket at that moment was stamped within the same
pass, so a delay bounds how late such a stamp was (the OS scheduling the
process late, other greenlets' work ahead of it in the loop). The
:class:`ClockReading` keeps the delays in a sketch, with the process's CPU and
wall seconds.

The **client-error bound** of a process is the :data:`BOUND_QUANTILE` of its
delays (their maximum where there are fewer than that quantile needs): a TTFT
is late by at most the bound, an inter-token gap off by at most the bound
either way. A run's bound is its worst process's. A figure is flagged where the
bound passes :data:`FLAG_SHARE` of it (TTFT p50, ITL mean). How well the bound
covers the true error is measured in docs/loadgen.md ("How exact it says it is").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddsketch import DDSketch

from llmload.core.metrics import SKETCH_RELATIVE_ACCURACY, RunSummary, sketch_from_bytes, sketch_to_bytes
from llmload.core.stats import min_samples, quantile_of

#: Seconds between two probe wake-ups (20 samples a second while requests are in flight).
PROBE_INTERVAL_S = 0.05
#: The statistic of the probe's delays that makes the bound.
BOUND_STAT = "p99"
BOUND_QUANTILE = quantile_of(BOUND_STAT)
#: A figure whose bound passes this share of it is flagged.
FLAG_SHARE = 0.05
#: Client CPU (share of one core) from which the process is called saturated.
SATURATED_CPU = 0.9
#: The figures a bound is compared with: the flag's name -> (summary column, title).
FLAGGED = {"ttft": ("ttft_p50", "TTFT p50"), "itl": ("itl_mean", "ITL mean")}


def _sketch() -> DDSketch:
    return DDSketch(SKETCH_RELATIVE_ACCURACY)


@dataclass
class ClockReading:
    """One process's probe so far: the delays (seconds) while requests were in flight, CPU and wall seconds."""

    delays: DDSketch = field(default_factory=_sketch)
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def samples(self) -> int:
        return int(self.delays.count)

    def add(self, delay: float) -> None:
        self.delays.add(max(delay, 0.0))

    def quantile(self, q: float) -> float | None:
        return self.delays.get_quantile_value(q) if self.samples else None

    @property
    def basis(self) -> str:
        """What the bound is: :data:`BOUND_STAT`, or ``max`` below the samples that quantile needs."""
        return BOUND_STAT if self.samples >= min_samples(BOUND_STAT) else "max"

    @property
    def bound(self) -> float | None:
        """Seconds: the delays' :data:`BOUND_QUANTILE`, or their maximum below the samples that quantile needs."""
        if not self.samples:
            return None
        return self.delays.get_quantile_value(BOUND_QUANTILE if self.basis == BOUND_STAT else 1.0)

    @property
    def cpu_share(self) -> float | None:
        """Process CPU seconds over wall seconds (1.0 = one core busy all the time)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None

    def to_wire(self) -> dict:
        return {"delays": sketch_to_bytes(self.delays) if self.samples else b"", "cpu_s": self.cpu_s,
                "wall_s": self.wall_s}

    @classmethod
    def from_wire(cls, data: dict) -> "ClockReading":
        reading = cls(cpu_s=data["cpu_s"], wall_s=data["wall_s"])
        if data["delays"]:
            reading.delays = sketch_from_bytes(data["delays"])
        return reading

    def to_dict(self) -> dict:
        """As ``<prefix>_summary.json`` shows it (ms and percent)."""
        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1000.0, 3)

        share = self.cpu_share
        return {"bound_ms": ms(self.bound), "basis": self.basis, "samples": self.samples,
                "loop_delay_ms": {"p50": ms(self.quantile(0.5)), "p90": ms(self.quantile(0.9)),
                                  "p99": ms(self.quantile(0.99)), "max": ms(self.quantile(1.0))},
                "cpu_pct": None if share is None else round(100.0 * share, 1),
                "saturated": share is not None and share >= SATURATED_CPU}


def worst(readings: dict[str, ClockReading]) -> tuple[str, ClockReading] | None:
    """The process whose bound is the largest (``(name, reading)``), None when no process has a sample."""
    measured = [(name, r) for name, r in readings.items() if r.samples]
    return max(measured, key=lambda item: item[1].bound) if measured else None


def figures_of(summary: RunSummary) -> dict[str, float | None]:
    """The figures a bound is compared with (seconds, by summary column): TTFT p50 and ITL mean, the exact mean
    of every gap where the summary has it (the reports'), else the TPOT mean (the live figures', which keep no
    gaps: the mean gap of each request, averaged)."""
    itl = summary.get("itl", "mean")
    return {"ttft_p50": summary.get("ttft", "p50"), "itl_mean": itl if itl is not None else summary.get("tpot", "mean")}


def flags(bound_s: float | None, figures: dict[str, float | None]) -> list[str]:
    """The figures (``ttft``, ``itl``) whose value in ``figures`` (by summary column, seconds) the bound passes
    :data:`FLAG_SHARE` of."""
    if bound_s is None:
        return []
    return [name for name, (column, _title) in FLAGGED.items()
            if figures.get(column) and bound_s > FLAG_SHARE * figures[column]]


def flag_text(names: list[str]) -> str:
    """``TTFT p50 and ITL mean`` of flag names."""
    return " and ".join(FLAGGED[name][1] for name in names)


def summary_block(readings: dict[str, ClockReading], figures: dict[str, float | None],
                  dispatch_lag_p99_s: float | None = None) -> dict | None:
    """``client_error`` of ``<prefix>_summary.json``: the run's bound (its worst process's), the figures it is
    compared with, the flags, and each worker's reading where there are several processes."""
    found = worst(readings)
    if found is None:
        return None
    name, reading = found
    block = {**reading.to_dict(), "worst_worker": name or None,
             "compared_with_ms": {column: None if figures.get(column) is None else round(figures[column] * 1000.0, 3)
                                  for column, _title in FLAGGED.values()},
             "flags": flags(reading.bound, figures),
             "dispatch_lag_p99_ms": None if dispatch_lag_p99_s is None else round(dispatch_lag_p99_s * 1000.0, 3)}
    workers = {n: r for n, r in readings.items() if n}
    if workers:
        block["workers"] = [{"worker": n, **r.to_dict()} for n, r in sorted(workers.items())]
    return block


def describe(block: dict | None) -> str:
    """The summary line's part: ``client error <= 1.2 ms (p99 of 2,400 loop samples, CPU 41 %)``, flags named."""
    if not block or block.get("bound_ms") is None:
        return ""
    cpu = "" if block.get("cpu_pct") is None else f", client CPU {block['cpu_pct']:.0f} %"
    text = (f", client error <= {block['bound_ms']:.1f} ms ({block['basis']} of {block['samples']:,} loop "
            f"samples{cpu})")
    if block.get("flags"):
        text += f" [over {FLAG_SHARE:.0%} of {flag_text(block['flags'])}]"
    return text
