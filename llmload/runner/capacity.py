"""The capacity search: the highest offered rate a server holds under an SLO, by bisection over the rate.

A rate *holds* when its cell's SLO attainment is at least the target (failed
requests count as misses) and its dispatch lag p99 is at most the limit (the
load generator kept its schedule). The search starts at the saturation
throughput; while every rate tried holds it doubles, and once one fails it
bisects between the highest rate that held and the lowest that failed, until
the bracket is within :data:`TOLERANCE` of its top or ``max_steps`` rates have
been tried. The capacity is the bracket's low end (None when no rate held).

Each search is one line of ``capacity.jsonl`` (:func:`llmload.core.runfiles.append_capacity`):

    {"server", "task", "mode", "slo": {"ttft": 500.0, ...} (ms), "slo_target": 99.0, "capacity_rps": float | None,
     "bracket": [low, high | None], "saturation_rps": float | None,
     "steps": [{"rate", "attainment", "goodput", "lag_p99_ms", "prefix"}, ...]}
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmload.core.metrics import SLO, RunSummary
from llmload.runner.plan import round_rate

#: The search stops once (high - low) <= TOLERANCE x high.
TOLERANCE = 0.05


@dataclass(frozen=True)
class Step:
    """One rate tried: what its cell measured and whether it held."""

    rate: float
    attainment: float | None  # percent
    goodput: float | None  # req/s
    lag_p99_ms: float | None
    prefix: str
    held: bool

    @classmethod
    def measured(cls, rate: float, prefix: str, summary: RunSummary | None, slo_target: float,
                 max_lag_s: float) -> "Step":
        """The step of a cell with ``summary`` (None: nothing measured, which does not hold)."""
        if summary is None:
            return cls(rate, None, None, None, prefix, held=False)
        lag = summary.get("dispatch_lag", "p99")
        held = (summary.slo_attainment is not None and summary.slo_attainment >= slo_target
                and (lag is None or lag <= max_lag_s))
        return cls(rate, summary.slo_attainment, summary.goodput, None if lag is None else lag * 1000.0, prefix, held)

    def record(self) -> dict:
        return {"rate": self.rate, "attainment": self.attainment, "goodput": self.goodput,
                "lag_p99_ms": self.lag_p99_ms, "prefix": self.prefix}


@dataclass
class CapacitySearch:
    """The state of one search; :meth:`next_rate` and :meth:`add` drive it (see the module docstring)."""

    saturation: float
    max_steps: int
    tolerance: float = TOLERANCE
    low: float = 0.0  # the highest rate that held (0: none yet)
    high: float | None = None  # the lowest rate that failed (None: none yet)
    steps: list[Step] = field(default_factory=list)

    def next_rate(self) -> float | None:
        """The next rate to try, or None when the search is over."""
        if len(self.steps) >= self.max_steps or self.saturation <= 0:
            return None
        if not self.steps:
            rate = self.saturation
        elif self.high is None:
            rate = self.low * 2
        else:
            if self.low > 0 and self.high - self.low <= self.tolerance * self.high:
                return None
            rate = (self.low + self.high) / 2
        rate = round_rate(rate)
        if rate <= 0 or any(step.rate == rate for step in self.steps):
            return None  # the bracket is narrower than the rates' rounding
        return rate

    def add(self, step: Step) -> None:
        self.steps.append(step)
        if step.held:
            self.low = max(self.low, step.rate)
        else:
            self.high = step.rate if self.high is None else min(self.high, step.rate)

    @property
    def capacity(self) -> float | None:
        return self.low if self.low > 0 else None

    @property
    def bracket(self) -> list[float | None]:
        return [self.low, self.high]

    def entry(self, server: str, task: str, mode: str, slo: SLO, slo_target: float) -> dict:
        """The search as one ``capacity.jsonl`` record."""
        return {"server": server, "task": task, "mode": mode, "slo": slo.to_dict(), "slo_target": slo_target,
                "capacity_rps": self.capacity, "bracket": self.bracket, "saturation_rps": self.saturation,
                "steps": [step.record() for step in self.steps]}

    def describe(self) -> str:
        """``3.2 req/s (held 3.2, failed 3.6; saturation 4.1 req/s; 5 steps)``."""
        head = "none held" if self.capacity is None else f"{self.capacity:g} req/s"
        failed = "none failed" if self.high is None else f"failed {self.high:g}"
        return (f"{head} (held {self.low:g}, {failed}; saturation {self.saturation:.3g} req/s; "
                f"{len(self.steps)} steps)")


def search(saturation: float, probe, max_steps: int, tolerance: float = TOLERANCE) -> CapacitySearch:
    """Run a whole search with ``probe(rate) -> Step`` (the runner runs a cell; tests script it)."""
    state = CapacitySearch(saturation, max_steps, tolerance)
    while (rate := state.next_rate()) is not None:
        state.add(probe(rate))
    return state
