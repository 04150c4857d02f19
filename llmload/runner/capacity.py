"""The capacity search: the highest offered rate a server holds under an SLO, with its 95 % interval.

The search starts at the saturation throughput; while every rate tried holds
it doubles, and once one does not it bisects between the highest rate that
held and the lowest that did not, until the two are within :data:`TOLERANCE`
of each other or ``--capacity-steps`` rates have been tried. Each rate is a
*step* of up to ``--capacity-looks`` cells: the first sends ``--requests``
requests, each later one twice as many as the one before (a longer look
gives a queue more time to show its growth), and after each the step is
decided by :func:`llmload.core.sequential.decide` (held, failed, or
undecided: one more look). A step still undecided at its
last look counts as not held for the bisection, and as neither bound of the
interval. The capacity is the middle of [highest held, lowest not held]; its
interval is [highest floor of a held step, lowest failed], a held step's floor
being its rate less the bound on its backlog's growth rate (docs/statistics.md,
"Capacity").

Each search is one line of ``capacity.jsonl`` (:meth:`CapacitySearch.entry`):

    {"server", "task", "mode", "slo": {"ttft": 500.0, ...} (ms), "slo_target": 99.0, "max_lag_ms": 500.0,
     "capacity_rps": float | None, "ci_low": float, "ci_high": float | None, "confidence": 0.95,
     "bracket": [highest held, lowest not held | None], "saturation_rps": float | None,
     "budget": {"steps", "looks", "tests", "confidence", "alpha"},
     "steps": [{"rate", "requests", "met", "attainment", "attainment_low", "attainment_high", "decision",
                "reason", "floor", "goodput", "lag_p99_ms", "prefix", "looks": [{"requests", "met", "lag_p99_ms",
                "goodput", "prefix", "trends": [{"series", "p_value", "growth", "slope", "bins", "fit_slope",
                "fit_se"}]}]}]}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator

from llmload.core.metrics import SLO, RequestResult, RunSummary
from llmload.core.runfiles import ERROR_RATE, Cell
from llmload.core.sequential import (FAILED, UNDECIDED, Budget, Decision, Look, backlog, bracket, capacity_estimate,
                                     decide, trend)
from llmload.runner.plan import round_rate
from monitors.sampler import MonitorError, read_monitor

#: The search stops once (lowest not held - highest held) <= TOLERANCE x lowest not held.
TOLERANCE = 0.05


@dataclass(frozen=True)
class Probe:
    """The next cell a search asks for: look ``look`` (0 = the first) of the step at ``rate``."""

    rate: float
    look: int


@dataclass
class Step:
    """One rate tried: its looks so far and the decision they support."""

    rate: float
    looks: list[Look] = field(default_factory=list)
    decided: Decision = Decision(UNDECIDED, "", (0.0, 100.0))

    @property
    def decision(self) -> str:
        return self.decided.decision

    @property
    def requests(self) -> int:
        return sum(x.requests for x in self.looks)

    def record(self) -> dict:
        met = sum(x.met for x in self.looks)
        lags = [x.lag_p99_ms for x in self.looks if x.lag_p99_ms is not None]
        last = self.looks[-1] if self.looks else None
        return {"rate": self.rate, "requests": self.requests, "met": met,
                "attainment": 100.0 * met / self.requests if self.requests else None,
                "attainment_low": self.decided.bounds[0], "attainment_high": self.decided.bounds[1],
                "decision": self.decision, "reason": self.decided.reason, "floor": self.decided.floor,
                "goodput": last.goodput if last else None,
                "lag_p99_ms": max(lags) if lags else None, "prefix": last.prefix if last else "",
                "looks": [x.record() for x in self.looks]}


@dataclass
class CapacitySearch:
    """The state of one search; :meth:`next_probe` and :meth:`add` drive it (see the module docstring)."""

    saturation: float
    target: float  # percent of requests that must meet the SLO
    budget: Budget
    max_lag_ms: float | None = None
    tolerance: float = TOLERANCE
    steps: list[Step] = field(default_factory=list)

    def decisions(self) -> list[tuple[float, Decision]]:
        return [(s.rate, s.decided) for s in self.steps]

    def next_probe(self) -> Probe | None:
        """The next cell to run, or None when the search is over."""
        current = self.steps[-1] if self.steps else None
        if current is not None and current.decision == UNDECIDED and len(current.looks) < self.budget.looks:
            return Probe(current.rate, len(current.looks))
        if len(self.steps) >= self.budget.steps or self.saturation <= 0:
            return None
        low, _, not_held = bracket(self.decisions())
        if current is None:
            rate = self.saturation
        elif not_held is None:
            rate = low * 2
        else:
            if low > 0 and not_held - low <= self.tolerance * not_held:
                return None
            rate = (low + not_held) / 2
        rate = round_rate(rate)
        if rate <= 0 or any(step.rate == rate for step in self.steps):
            return None  # the bracket is narrower than the rates' rounding
        return Probe(rate, 0)

    def add(self, probe: Probe, look: Look, failed: str = "") -> Step:
        """Add what the cell of ``probe`` measured and decide its step again (``failed``: why the step fails
        whatever it measured)."""
        if probe.look == 0:
            self.steps.append(Step(probe.rate))
        step = self.steps[-1]
        step.looks.append(look)
        step.decided = decide(step.rate, step.looks, self.target, self.budget.alpha, self.max_lag_ms)
        if failed:
            step.decided = Decision(FAILED, failed, step.decided.bounds)
        return step

    @property
    def estimate(self) -> tuple[float | None, float, float | None]:
        """(capacity, interval low, interval high)."""
        return capacity_estimate(self.decisions())

    def entry(self, server: str, task: str, mode: str, slo: SLO) -> dict:
        """The search as one ``capacity.jsonl`` record."""
        value, low, high = self.estimate
        held, _, not_held = bracket(self.decisions())
        return {"server": server, "task": task, "mode": mode, "slo": slo.to_dict(), "slo_target": self.target,
                "max_lag_ms": self.max_lag_ms, "capacity_rps": value, "ci_low": low, "ci_high": high,
                "confidence": self.budget.confidence, "bracket": [held, not_held], "saturation_rps": self.saturation,
                "budget": self.budget.to_dict(), "steps": [step.record() for step in self.steps]}

    def describe(self) -> str:
        """``20.1 req/s [19.5, 20.6] (95 %; held 19.5, not held 20.6; saturation 19.7 req/s; 6 steps, 9 cells)``."""
        value, low, high = self.estimate
        held, _, not_held = bracket(self.decisions())
        head = "none held" if value is None else f"{value:.4g} req/s"
        interval = f"[{low:.4g}, {'open' if high is None else f'{high:.4g}'}]"
        undecided = sum(s.decision == UNDECIDED for s in self.steps)
        return (f"{head} {interval} ({self.budget.confidence * 100:g} %; held {held:.4g}, "
                f"{'nothing failed' if not_held is None else f'not held {not_held:.4g}'}"
                + (f", {undecided} undecided" if undecided else "")
                + f"; saturation {self.saturation:.4g} req/s; {len(self.steps)} steps, "
                  f"{sum(len(s.looks) for s in self.steps)} cells)")


def search_cells(search: CapacitySearch, cell_for: Callable[[Probe], Any], look_for: Callable[[Any, Any], Look]
                 ) -> Generator[Any, Any, CapacitySearch]:
    """The search's loop: yield ``cell_for(probe)`` for each probe, receive its result, add ``look_for(cell,
    result)``; returns the finished search. The runner yields cells and sends their results; tests script them."""
    while (probe := search.next_probe()) is not None:
        cell = cell_for(probe)
        result = yield cell
        search.add(probe, look_for(cell, result), failed_because(cell))
    return search


def failed_because(cell: Any) -> str:
    """Why the step of ``cell`` fails whatever its requests show: its load generator stopped it at
    --max-error-rate (status error-rate); "" otherwise."""
    return getattr(cell, "error", "") or ERROR_RATE if getattr(cell, "status", "") == ERROR_RATE else ""


def look_of(cell: Cell, results: list[RequestResult], summary: RunSummary | None, run_dir: Path) -> Look:
    """What a capacity cell measured: the SLO attainment, lag, goodput and the trends of its queue."""
    measured = [r for r in results if not r.warmup]
    if summary is None or not measured:
        return Look(0, 0, prefix=cell.prefix)
    lag = summary.get("dispatch_lag", "p99")
    times, level = backlog(results)
    trends = [trend("backlog", times, level)]
    monitor = cell.files(run_dir).monitor
    if len(times) and monitor.is_file():
        try:
            frame = read_monitor(monitor)
        except (MonitorError, ValueError):
            frame = None
        if frame is not None and "server_waiting" in frame.columns and frame["server_waiting"].notna().any():
            inside = frame[(frame["timestamp"] >= times[0]) & (frame["timestamp"] <= times[-1])]
            trends.append(trend("server waiting", inside["timestamp"], inside["server_waiting"]))
    return Look(len(measured), sum(1 for r in measured if r.slo_ok), None if lag is None else lag * 1000.0,
                trends, cell.prefix, summary.goodput)

