"""The capacity search: the highest offered rate a server holds under an SLO, with its 95 % interval.

The search is placed by the saturation run's throughput and aims each step at a
bound that would finish it (docs/runner.md, "The capacity search"):

* It stops once the capacity's interval [lo, hi] is within +-``--capacity-ci``
  percent of its centre, i.e. ``hi / lo <= ratio = (1 + w) / (1 - w)``; or after
  ``--capacity-steps`` rates; or when no new rate is left between the bounds.
* The first step is at the saturation run's completion rate
  (:func:`llmload.core.sequential.saturation_throughput`) less a tenth of the
  target ratio (:data:`START_SHARE`), or at that rate's interval's low end where
  that is closer.
* Once a step held and none failed above it, the next goes above it, at the
  highest rate whose failure would finish the search (the floor x ``ratio **
  EDGE_UP``; beyond the start, twice as far each time on the log scale, at most
  doubling). While nothing held, the next goes below the lowest rate tried,
  twice as far as the last time (at most halving), or below where the shares
  measured cross the target (:meth:`CapacitySearch.crossing`), and no higher than
  the rate at which the lowest step's goodput would meet the target. Between a
  held and a failed step: first the edges that would finish the search (above
  the floor; below the failed rate, the floor's expected loss allowed for), then
  either side of the shares' crossing, then the geometric middle of the wider gap
  (undecided steps split the bracket).
* Each rate is a *step* of up to ``--capacity-looks`` cells: the first sends at
  least the requests a hold needs (:func:`llmload.core.sequential.look_sizes`),
  each later one twice the one before, and after each the step is decided by
  :func:`llmload.core.sequential.decide` on all its requests so far (held,
  failed, or undecided). An undecided step takes its next look only if that
  look could decide it at the share measured (:func:`llmload.core.sequential.
  could_decide`); otherwise the search places another step, and comes back to it
  (its requests so far counted) when a later candidate rate falls within
  :data:`RESUME_SHARE` of the target ratio of it. A step none of whose looks
  left could decide it is futile and never resumed.
* The error budget is the :class:`llmload.core.sequential.Budget`'s: the
  ``j``-th step opened and its ``k``-th look get shares fixed in advance.
* An undecided step counts as not held for the placement and bounds nothing.
  The capacity is the middle of [highest held, lowest not held]; its interval
  is [highest floor of a held step, lowest failed], a held step's floor being
  its rate less the bound on its backlog's growth rate (docs/statistics.md,
  "Capacity").

Each search is one line of ``capacity.jsonl`` (:meth:`CapacitySearch.entry`):

    {"server", "task", "mode", "slo": {"ttft": 500.0, ...} (ms), "slo_target": 99.0, "max_lag_ms": 500.0,
     "capacity_rps": float | None, "ci_low": float, "ci_high": float | None, "confidence": 0.95,
     "bracket": [highest held, lowest not held | None], "saturation_rps": float | None,
     "start": {"rate", "low", "high", "completions", "span_s"} | None, "ci_target_pct": 5.0,
     "half_width_pct": float | None, "stopped": "why the search ended",
     "budget": {"steps", "looks", "tests", "confidence", "spending", "alpha", "first_alpha"},
     "steps": [{"rate", "why", "index", "sizes": [int, ...], "requests", "met", "attainment", "attainment_low", "attainment_high", "decision",
                "reason", "floor", "futile", "goodput", "lag_p99_ms", "prefix", "looks": [{"requests", "met",
                "lag_p99_ms", "goodput", "prefix", "trends": [{"series", "p_value", "growth", "slope", "bins",
                "fit_slope", "fit_se", "span"}]}]}]}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

from llmload.core.metrics import SLO, RequestResult, RunSummary
from llmload.core.runfiles import ERROR_RATE, Cell
from llmload.core.sequential import (FAILED, HELD, UNDECIDED, Budget, Decision, Look, Throughput, backlog, bracket,
                                     capacity_estimate, could_decide, decide, look_sizes, trend)
from llmload.runner.plan import round_rate
from monitors.sampler import MonitorError, read_monitor

#: Default ``--capacity-ci``: the search stops once the capacity's interval is within +- this percent of its centre.
CI_PCT = 5.0
#: The first step: below the start estimate by this share of the target ratio (log scale).
START_SHARE = 0.1
#: An edge step's distance from the bound it would finish the search with, as a share of the target ratio (log
#: scale): above a floor (a failure there finishes it), below a failed rate (a hold there does, its floor allowed
#: for).
EDGE_UP = 0.98
EDGE_DOWN = 0.9
#: A candidate rate this close to a step that still has looks (share of the target ratio, log scale) resumes it.
RESUME_SHARE = 0.125
#: The expected floor of a held step, as a share of its rate: its backlog's growth bound is at least one request
#: over the look's span (:meth:`llmload.core.sequential.Trend.slope_high`), which a look of ``n`` measured
#: requests at the step's rate spans about ``n - FLOOR_SETTLE`` arrivals of.
FLOOR_SETTLE = 10


@dataclass(frozen=True)
class Probe:
    """The next cell a search asks for: look ``look`` (0 = the first) of the step at ``rate``, ``requests``
    requests, and why that rate (``start``, ``above``, ``below``, ``between``, ``more``, ``resume``)."""

    rate: float
    look: int
    requests: int = 0
    why: str = ""


@dataclass
class Step:
    """One rate tried: its looks so far, the decision they support, and whether it stopped early (futile)."""

    rate: float
    why: str = ""
    index: int = 0  # the order it was opened in (0 = first): its share of the error budget
    looks: list[Look] = field(default_factory=list)
    decided: Decision = Decision(UNDECIDED, "", (0.0, 100.0))
    futile: bool = False

    @property
    def decision(self) -> str:
        return self.decided.decision

    @property
    def requests(self) -> int:
        return sum(x.requests for x in self.looks)

    @property
    def met(self) -> int:
        return sum(x.met for x in self.looks)

    def record(self) -> dict:
        lags = [x.lag_p99_ms for x in self.looks if x.lag_p99_ms is not None]
        last = self.looks[-1] if self.looks else None
        return {"rate": self.rate, "why": self.why, "index": self.index, "requests": self.requests, "met": self.met,
                "attainment": 100.0 * self.met / self.requests if self.requests else None,
                "attainment_low": self.decided.bounds[0], "attainment_high": self.decided.bounds[1],
                "decision": self.decision, "reason": self.decided.reason, "floor": self.decided.floor,
                "futile": self.futile, "goodput": last.goodput if last else None,
                "lag_p99_ms": max(lags) if lags else None, "prefix": last.prefix if last else "",
                "looks": [x.record() for x in self.looks]}


@dataclass
class CapacitySearch:
    """The state of one search; :meth:`next_probe` and :meth:`add` drive it (see the module docstring).

    ``saturation`` is the saturation run's request throughput (whole run), ``start`` its completion rate with an
    interval (the search starts from ``start.rate`` where given, else from ``saturation``); ``requests`` and
    ``warmup`` are ``--requests`` and ``--warmup`` (a look's size, :func:`llmload.core.sequential.look_sizes`).
    """

    saturation: float
    target: float  # percent of requests that must meet the SLO
    budget: Budget
    max_lag_ms: float | None = None
    ci_pct: float = CI_PCT
    requests: int = 0
    warmup: int = 0
    start: Throughput | None = None
    steps: list[Step] = field(default_factory=list)
    current: Step | None = None
    stopped: str = ""

    @property
    def ratio(self) -> float:
        """The largest hi / lo of an interval within +- ``ci_pct`` % of its centre."""
        w = self.ci_pct / 100.0
        return (1.0 + w) / (1.0 - w)

    def sizes(self, index: int) -> list[int]:
        """Requests each look of the ``index``-th step sends."""
        return look_sizes(self.requests, self.budget.looks, self.warmup, self.target, self.budget.alpha_at(index, 0))

    @property
    def start_rate(self) -> float:
        """The rate the search starts from: the saturation run's completion rate, else its request throughput."""
        return self.start.rate if self.start is not None else self.saturation

    def decisions(self) -> list[tuple[float, Decision]]:
        return [(s.rate, s.decided) for s in self.steps]

    def has_looks(self, step: Step) -> bool:
        """Whether ``step`` may take another look: undecided, not futile (some look it has left could decide it),
        and under ``--capacity-looks``."""
        return step.decision == UNDECIDED and not step.futile and len(step.looks) < self.budget.looks

    def next_probe(self) -> Probe | None:
        """The next cell to run, or None when the search is over (:attr:`stopped` says why)."""
        current = self.current
        if current is not None and self.has_looks(current) and could_decide(
                current.met, current.requests, self.sizes(current.index)[len(current.looks)] - self.warmup,
                self.target, self.budget.alpha_at(current.index, len(current.looks))):
            return self._probe(current, "more")
        _, low, high = self.estimate
        if high is not None and low > 0 and high / low <= self.ratio:
            self.stopped = f"the interval is within +-{self.ci_pct:g} %"
            return None
        if self.start_rate <= 0:
            self.stopped = "no saturation throughput"
            return None
        top = max((s.rate for s in self.steps if s.decision == HELD), default=0.0)
        close = RESUME_SHARE * math.log(self.ratio)
        for rate, why in self._candidates():
            if rate <= top or (high is not None and rate >= high):
                continue  # outside the bounds the steps set
            near = sorted(self.steps, key=lambda s: abs(math.log(rate / s.rate)))
            if near and abs(math.log(rate / near[0].rate)) <= close:
                if self.has_looks(near[0]):
                    return self._probe(near[0], "resume")
                continue  # a rate already decided (or out of looks)
            if round_rate(rate) <= 0 or any(s.rate == round_rate(rate) for s in self.steps):
                continue  # the rates' rounding leaves it no new rate
            if len(self.steps) >= self.budget.steps:
                self.stopped = f"--capacity-steps {self.budget.steps} rates tried"
                return None
            return Probe(round_rate(rate), 0, self.sizes(len(self.steps))[0], why)
        self.stopped = "no new rate between the bounds the steps set"
        return None

    def _probe(self, step: Step, why: str) -> Probe:
        return Probe(step.rate, len(step.looks), self.sizes(step.index)[len(step.looks)], why)

    def _candidates(self) -> Iterator[tuple[float, str]]:
        """The rates the next step could take, best first, and why (see the module docstring)."""
        ratio = self.ratio
        if not self.steps:
            first = self.start_rate / ratio ** START_SHARE
            yield (max(first, self.start.low) if self.start is not None and self.start.low < self.start_rate
                   else first), "start"
            return
        _, low, high = self.estimate
        held = [s for s in self.steps if s.decision == HELD]
        top = max((s.rate for s in held), default=0.0)
        undecided = sorted(s.rate for s in self.steps if s.decision == UNDECIDED and s.rate > top
                           and (high is None or s.rate < high))
        loss = 1.0 - 1.0 / max(10, self.sizes(len(self.steps))[0] - self.warmup - FLOOR_SETTLE)
        crossing = self.crossing()
        if not held:  # below the lowest rate tried, twice as far (log scale) as the last time, at most halving
            lowest = min(self.steps, key=lambda s: s.rate)
            nearest, farthest = lowest.rate / ratio ** EDGE_DOWN, lowest.rate / 2
            if crossing is not None:  # below where the shares measured put the target, within that reach
                yield min(nearest, max(farthest, crossing / ratio ** 0.5)), "below"
            reach = lowest.rate / min(2.0, ratio ** (EDGE_DOWN * 2 ** (len(self.steps) - 1)))
            goodput = lowest.rate * lowest.met / max(1, lowest.requests) * 100.0 / self.target
            yield min(reach, max(farthest, goodput)), "below"  # at most the rate its goodput would meet the target
            return
        up = low * ratio ** EDGE_UP  # a failure here would finish the search
        if undecided and up <= undecided[-1] * ratio ** RESUME_SHARE:
            # an undecided step too far above the floor for a failure to finish it: a hold closer below it
            yield undecided[0] / ratio ** EDGE_DOWN, "below"
        if high is None:  # above the floor; beyond the start, twice as far (log scale) each time, at most doubling
            beyond = sum(s.rate > self.start_rate for s in held)
            reach = min(2.0, ratio ** (EDGE_UP * 2 ** max(0, beyond - 1)))
            # at least twice the resume distance above the highest hold: nearer, it would count as that rate
            # (a hold whose floor lies far below it left every rate that could finish the search there)
            yield max(low * reach, top * ratio ** max(START_SHARE, 2 * RESUME_SHARE),
                      undecided[-1] * ratio ** 0.5 if undecided else 0.0), "above"
            return
        if high / low <= ratio ** 2 or undecided:
            yield up, "above"
            yield high / ratio ** EDGE_DOWN / loss, "below"  # a hold here (its floor a little below it) finishes it
        if crossing is not None and top < crossing < high:  # either side of it, the wider gap first
            sides = [(crossing * ratio ** 0.5, "above"), (crossing / ratio ** 0.5, "below")]
            yield from (sides if high / crossing > crossing / top else sides[::-1])
        gaps = [(top, undecided[0] if undecided else high), (undecided[-1] if undecided else top, high)]
        for a, b in sorted(gaps, key=lambda gap: gap[0] / gap[1]):  # the wider gap first
            yield math.sqrt(a * b), "between"

    def crossing(self) -> float | None:
        """Where the share of requests meeting the SLO crosses the target, by linear interpolation between the
        highest rate whose measured share reached it and the lowest above that did not (or, when none reached it,
        extrapolation from the two lowest rates); None without two such shares strictly between 0 and 100 %."""
        shares = sorted((s.rate, 100.0 * s.met / s.requests) for s in self.steps if s.requests)
        reached = [(r, p) for r, p in shares if p >= self.target]
        if reached:
            a = reached[-1]
            above = [(r, p) for r, p in shares if r > a[0] and p < self.target]
            if not above:
                return None
            b = above[0]
        elif len(shares) >= 2:
            a, b = shares[0], shares[1]
        else:
            return None
        if a[1] <= b[1] or min(a[1], b[1]) <= 0.0 or max(a[1], b[1]) >= 100.0:
            return None  # no fall in the share to go by, or one from (or to) a share it could have kept further
        return a[0] + (a[1] - self.target) / (a[1] - b[1]) * (b[0] - a[0])

    def add(self, probe: Probe, look: Look, failed: str = "") -> Step:
        """Add what the cell of ``probe`` measured and decide its step again (``failed``: why the step fails
        whatever it measured)."""
        step = next((s for s in self.steps if s.rate == probe.rate), None)
        if step is None:
            step = Step(probe.rate, probe.why, len(self.steps))
            self.steps.append(step)
        step.looks.append(look)
        alphas = self.budget.alphas(step.index)
        step.decided = decide(step.rate, step.looks, self.target, alphas, self.max_lag_ms)
        if failed:
            step.decided = Decision(FAILED, failed, step.decided.bounds)
        left = sum(n - self.warmup for n in self.sizes(step.index)[len(step.looks):])
        step.futile = step.decision == UNDECIDED and not could_decide(step.met, step.requests, left, self.target,
                                                                      alphas[-1])
        self.current = step
        return step

    @property
    def estimate(self) -> tuple[float | None, float, float | None]:
        """(capacity, interval low, interval high)."""
        return capacity_estimate(self.decisions())

    @property
    def half_width_pct(self) -> float | None:
        """The interval's half-width in percent of its centre (None while it has no upper end)."""
        _, low, high = self.estimate
        return None if high is None else 100.0 * (high - low) / (high + low)

    def entry(self, server: str, task: str, mode: str, slo: SLO) -> dict:
        """The search as one ``capacity.jsonl`` record."""
        value, low, high = self.estimate
        held, _, not_held = bracket(self.decisions())
        return {"server": server, "task": task, "mode": mode, "slo": slo.to_dict(), "slo_target": self.target,
                "max_lag_ms": self.max_lag_ms, "capacity_rps": value, "ci_low": low, "ci_high": high,
                "confidence": self.budget.confidence, "bracket": [held, not_held], "saturation_rps": self.saturation,
                "start": self.start.to_dict() if self.start is not None else None, "ci_target_pct": self.ci_pct,
                "half_width_pct": self.half_width_pct, "stopped": self.stopped,
                "budget": self.budget.to_dict(),
                "steps": [{**step.record(), "sizes": self.sizes(step.index)} for step in self.steps]}

    def describe(self) -> str:
        """``20.1 req/s [19.5, 20.6] (95 %, +-2.8 %; held 19.5, not held 20.6; start 20.0 req/s; 2 steps, 2 cells;
        the interval is within +-5 %)``."""
        value, low, high = self.estimate
        held, _, not_held = bracket(self.decisions())
        head = "none held" if value is None else f"{value:.4g} req/s"
        interval = f"[{low:.4g}, {'open' if high is None else f'{high:.4g}'}]"
        width = self.half_width_pct
        undecided = sum(s.decision == UNDECIDED for s in self.steps)
        start = self.start_rate
        return (f"{head} {interval} ({self.budget.confidence * 100:g} %"
                + ("" if width is None else f", +-{width:.1f} %") + f"; held {held:.4g}, "
                + ("nothing failed" if not_held is None else f"not held {not_held:.4g}")
                + (f", {undecided} undecided" if undecided else "")
                + f"; start {start:.4g} req/s; {len(self.steps)} steps, "
                  f"{sum(len(s.looks) for s in self.steps)} cells"
                + (f"; {self.stopped}" if self.stopped else "") + ")")


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
