"""A load point: what one cell measures (server, task, mode, load level, phase) and its label.

The runner plans, names and prints its cells by it; the reports group, match and
label their rows by it; ``cells.jsonl`` and the report's CSVs hold it as the
columns of :meth:`Point.record` (``concurrency``, ``rate``, ``phase``). A new kind
of load level is one more field of :class:`Load` with its label and tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: The phase of a replayed trace's cells (``--trace``): the trace gives their schedule; their load's
#: concurrency is the pool of requests in flight.
TRACE_PHASE = "trace"


@dataclass(frozen=True)
class Load:
    """A load level: a closed loop of ``concurrency`` users, or an open loop at ``rate`` requests/s (with
    ``concurrency`` the pool of requests in flight)."""

    concurrency: int
    rate: float | None = None

    @property
    def closed(self) -> bool:
        return self.rate is None

    @property
    def label(self) -> str:
        """``c8`` or ``r2.5/s``: as tables show it."""
        return f"c{self.concurrency}" if self.closed else f"r{self.rate:g}/s"

    @property
    def tag(self) -> str:
        """``c8`` or ``r2.5``: as file names and the calibration file hold it."""
        return f"c{self.concurrency}" if self.closed else f"r{self.rate:g}"

    def describe(self) -> str:
        """``c=8`` or ``rate=2.5/s pool=16``: as the runner's progress lines show it."""
        return f"c={self.concurrency}" if self.closed else f"rate={self.rate:g}/s pool={self.concurrency}"


@dataclass(frozen=True)
class Point:
    """One load level of one server, task and mode, in one phase of the run; its cells are its repeats."""

    server: str
    task: str
    mode: str
    load: Load
    phase: str = "matrix"  # which part of the run: "matrix", "sweep", "capacity" or "trace"

    @property
    def key(self) -> tuple:
        """``(server, task, mode, concurrency, rate, phase)``: the point as a plain tuple (seeds, sorting)."""
        return (self.server, self.task, self.mode, self.load.concurrency, self.load.rate, self.phase)

    @property
    def label(self) -> str:
        """``mock qa stream c4``, the phase after it when it is not the matrix."""
        return " ".join([self.server, self.task, self.mode, self.load.label]
                        + ([self.phase] if self.phase != "matrix" else []))

    @property
    def level(self) -> str:
        """The load's label, ``trace`` after it for a replayed trace (tables without a phase column)."""
        return self.load.label + (" trace" if self.phase == TRACE_PHASE else "")

    @property
    def shared(self) -> tuple:
        """What two servers' points share to be compared: task, mode, load level and phase."""
        return (self.task, self.mode, self.load, self.phase)

    def record(self) -> dict:
        """The point as the run files' and the report's columns."""
        return {"server": self.server, "task": self.task, "mode": self.mode, "concurrency": self.load.concurrency,
                "rate": self.load.rate, "phase": self.phase}

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "Point":
        """The point of a record with :meth:`record`'s keys (``phase`` defaults to the matrix)."""
        rate = data.get("rate")
        return cls(data["server"], data["task"], data["mode"],
                   Load(int(data["concurrency"]), None if rate in (None, "") else float(rate)),
                   data.get("phase") or "matrix")
