"""The capacity search's decisions: SLO attainment with exact bounds, over-saturation by a trend test, and the
capacity's interval from the decisions (docs/statistics.md, "Capacity").

A step (one offered rate) is looked at after each of its cells. At a look, the
attainment ``met`` of ``n`` requests gets one-sided Clopper-Pearson bounds at
level ``1 - alpha`` each; the step *holds* when the lower bound is at or above
the target (and no over-saturation test fires, and the dispatch lag kept to its
limit), *fails* when the upper bound is below the target or a trend test says
the queue grows, and is *undecided* otherwise (more requests are sent).

Over-saturation: the backlog (requests due by their schedule and not yet ended:
the client's queue plus the server's in-flight and waiting requests) sampled at
each request's intended start, and the server's own ``waiting`` series where
the monitor has it, are averaged in :data:`TREND_BINS` equal spans of time. The
Mann-Kendall test (Kendall's tau of the bin means against time, one-sided) says
whether they grow, the Theil-Sen slope how much over the look; a least-squares
line through the bin means gives the backlog's growth rate an upper bound
(Student's t), and never less than :data:`MIN_GROWTH` over the look's span (a
queue growing by less than one request over a look leaves an integer backlog
as it was). Averaging in bins makes the bin means close to independent,
which both assume. A held step shows that the server kept up with its rate up
to that bound: the rate less the bound is the step's *floor*.

Error budget (:class:`Budget`): a wrong decision is a hold (or a floor) above
the capacity, or a failure below it. Each test at look ``k`` of the ``j``-th
step gets ``alpha = (1 - confidence) x spent(j) x spent(k) / tests``, shares
fixed in advance that sum to 1 over the steps and looks (``halving``: 1/2, 1/4,
...; records written before it: ``uniform``, ``1 / (steps x looks)``), so by the
union bound all the decisions of a search are right with probability at least
``confidence``; then, if the share of requests meeting the SLO falls as the
rate rises, the capacity lies between the highest floor of a held step and the
lowest rate that failed: that is the capacity's interval.

Sizes: a step's first look sends at least the requests a hold needs
(:func:`look_sizes`), and a look after which no remaining look could decide the
step at the share it measured is its last (:func:`could_decide`).
"""

from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np

from llmload.core.metrics import RequestResult

CONFIDENCE = 0.95


def scipy_stats():
    """scipy.stats, imported on first use (1 s of CPU: a runner that searches no capacity never pays it)."""
    from scipy import stats  # heavy: deferred to the first test that needs it

    return stats


def prefetch_scipy_stats() -> None:
    """Import scipy.stats in a background thread, while this process waits on a cell, so that the search's first
    decision does not wait for it (the import's time lay between the saturation run and the first step)."""
    threading.Thread(target=scipy_stats, name="prefetch-scipy-stats", daemon=True).start()


#: Equal spans of time a step's series is averaged in before the trend test.
TREND_BINS = 10
#: A series must grow by at least this much over the step (Theil-Sen slope x its span) to count as growing:
#: a backlog that grows by less than one request over a whole step is no queue.
MIN_GROWTH = 1.0
#: The tests at each look that can fail a step: the attainment's upper bound, and the trend of the backlog and of
#: the server's waiting requests.
TESTS_PER_LOOK = 3
HELD, FAILED, UNDECIDED = "held", "failed", "undecided"
#: How :class:`Budget` splits the error budget over steps and looks (records before the split: uniform).
HALVING, UNIFORM = "halving", "uniform"


def attainment_bounds(met: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a share ``met / n`` in percent, each at level ``1 - alpha``."""
    if n <= 0:
        return 0.0, 100.0
    low = 0.0 if met <= 0 else float(scipy_stats().beta.ppf(alpha, met, n - met + 1))
    high = 1.0 if met >= n else float(scipy_stats().beta.ppf(1.0 - alpha, met + 1, n - met))
    return 100.0 * low, 100.0 * high


def requests_to_hold(target: float, alpha: float) -> float:
    """The fewest requests, all meeting the SLO, whose lower bound reaches ``target`` % (inf for 100 %)."""
    if target >= 100.0:
        return math.inf
    return math.ceil(math.log(alpha) / math.log(target / 100.0))


def spent(index: int, count: int, spending: str) -> float:
    """The share of a budget the ``index``-th (0 = first) of ``count`` steps or looks gets: ``uniform``, 1 / count;
    ``halving``, half of what the ones before left, the last one all of it (1/2, 1/4, ..., 1/2^(count-1), the same
    again), so that the shares sum to 1."""
    if spending == UNIFORM:
        return 1.0 / count
    return 0.5 ** min(index + 1, count - 1)


@dataclass(frozen=True)
class Budget:
    """How the search's error probability ``1 - confidence`` is split over its steps, looks and tests: each test
    at look ``k`` of the ``j``-th step opened gets ``(1 - confidence) x spent(j) x spent(k) / tests``. The shares
    are fixed before anything is measured and sum to 1 over steps and looks, so the union bound holds (a weighted
    Bonferroni split); ``halving`` gives the first steps and looks, where a search decides most, the most."""

    steps: int
    looks: int
    confidence: float = CONFIDENCE
    tests: int = TESTS_PER_LOOK
    spending: str = HALVING

    def alpha_at(self, step: int, look: int) -> float:
        """The level of each test at look ``look`` of step ``step`` (both 0 = the first)."""
        return ((1.0 - self.confidence) * spent(step, self.steps, self.spending)
                * spent(look, self.looks, self.spending) / self.tests)

    def alphas(self, step: int) -> list[float]:
        """The levels of the looks of step ``step``, in order."""
        return [self.alpha_at(step, k) for k in range(self.looks)]

    @property
    def alpha(self) -> float:
        """The smallest level of any test (the last step's last look)."""
        return self.alpha_at(self.steps - 1, self.looks - 1)

    def to_dict(self) -> dict:
        return {**asdict(self), "alpha": self.alpha, "first_alpha": self.alpha_at(0, 0)}


def look_sizes(requests: int, looks: int, warmup: int, target: float, alpha: float) -> list[int]:
    """Requests each look of a step sends: the first at least ``requests`` and enough for a hold (every measured
    request meeting the SLO: :func:`requests_to_hold`, plus ``warmup``), each later one twice the one before."""
    need = requests_to_hold(target, alpha)
    first = requests if math.isinf(need) else max(requests, int(need) + warmup)
    return [first * 2 ** k for k in range(looks)]


def could_decide(met: int, n: int, more: int, target: float, alpha: float) -> bool:
    """Whether ``more`` measured requests could decide a step that measured ``met`` of ``n``, if its share stayed
    ``met / n``: False once even all of them would leave both bounds around the target (the step is at the
    target within what its looks can tell)."""
    if n <= 0 or more <= 0:
        return more > 0
    total = n + more
    low, high = attainment_bounds(round(met / n * total), total, alpha)
    return low >= target or high < target


@dataclass(frozen=True)
class Throughput:
    """A closed loop's completion rate at saturation, in requests/s: the least-squares slope of the count of
    completed requests against time, from its first completion to its last dispatch (while every user was busy;
    to its last completion when every request went out at once), with a 95 % interval (Student's t over the
    rates in :data:`TREND_BINS` equal spans of that window)."""

    rate: float
    low: float
    high: float
    completions: int
    span_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def saturation_throughput(results: Iterable[RequestResult]) -> Throughput | None:
    """The completion rate of a closed loop's measured, successful requests (see :class:`Throughput`); None when
    fewer than ``2 x`` :data:`TREND_BINS` completed in the window."""
    rows = np.array([(r.start_time, r.start_time + r.end_offset) for r in results if r.success and not r.warmup],
                    dtype=float).reshape(-1, 2)
    if len(rows) < 2 * TREND_BINS:
        return None
    ends = np.sort(rows[:, 1])
    first, dispatch = float(ends[0]), float(rows[:, 0].max())
    busy = ends[ends <= dispatch]
    inside = busy if busy.size >= 2 * TREND_BINS else ends
    span = float(inside[-1] - first)
    if inside.size < 2 * TREND_BINS or span <= 0:
        return None
    rate = float(scipy_stats().linregress(inside, np.arange(1, inside.size + 1)).slope)
    per_bin = np.bincount(np.clip(((inside - first) / span * TREND_BINS).astype(int), 0, TREND_BINS - 1),
                          minlength=TREND_BINS) / (span / TREND_BINS)
    half = float(scipy_stats().t.ppf(0.975, TREND_BINS - 1)) * float(per_bin.std(ddof=1)) / math.sqrt(TREND_BINS)
    return Throughput(rate, max(0.0, rate - half), rate + half, int(inside.size), span)


# --------------------------------------------------------------------------- over-saturation


@dataclass(frozen=True)
class Trend:
    """The trend of one series through a look: Mann-Kendall's one-sided p-value, the Theil-Sen slope and growth,
    and the least-squares slope with its standard error (for :meth:`slope_high`)."""

    series: str
    p_value: float | None  # None: too few bins to test
    growth: float | None  # Theil-Sen slope x the span: how much the series grew over the look
    slope: float | None = None  # Theil-Sen, per second
    bins: int = 0
    fit_slope: float | None = None  # least squares through the bin means, per second
    fit_se: float | None = None
    span: float | None = None  # seconds the series covered (None: a record written before it was kept)

    def growing(self, alpha: float) -> bool:
        return (self.p_value is not None and self.p_value < alpha and self.growth is not None
                and self.growth >= MIN_GROWTH)

    def slope_high(self, alpha: float) -> float | None:
        """One-sided upper bound of the growth rate at level ``1 - alpha`` (Student's t, bins - 2 df), at least
        :data:`MIN_GROWTH` over the span: growth slower than that leaves the integer backlog unchanged."""
        if self.fit_slope is None or self.fit_se is None or self.bins < 4:
            return None
        bound = self.fit_slope + float(scipy_stats().t.ppf(1.0 - alpha, self.bins - 2)) * self.fit_se
        return max(bound, MIN_GROWTH / self.span) if self.span else bound

    @classmethod
    def from_dict(cls, data: dict) -> "Trend":
        return cls(**{k: data.get(k) for k in ("series", "p_value", "growth", "slope", "fit_slope", "fit_se",
                                               "span")}, bins=int(data.get("bins") or 0))


def trend(series: str, times: Sequence[float], values: Sequence[float], bins: int = TREND_BINS) -> Trend:
    """Mann-Kendall, Theil-Sen and least squares on the means of ``values`` in ``bins`` equal spans of ``times``."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    if t.size < 2 * bins or t.max() <= t.min():
        return Trend(series, None, None)
    edges = np.linspace(t.min(), t.max(), bins + 1)
    index = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    filled = counts > 0
    means = np.bincount(index, weights=v, minlength=bins)[filled] / counts[filled]
    centres = ((edges[:-1] + edges[1:]) / 2)[filled]
    if means.size < 4:
        return Trend(series, None, None, bins=int(means.size))
    span = float(t.max() - t.min())
    if np.ptp(means) == 0:
        return Trend(series, 1.0, 0.0, 0.0, int(means.size), 0.0, 0.0, span)
    fit = scipy_stats().linregress(centres, means)
    p_value = float(scipy_stats().kendalltau(centres, means, alternative="greater").pvalue)
    slope = float(scipy_stats().theilslopes(means, centres).slope)
    return Trend(series, p_value, slope * span, slope, int(means.size), float(fit.slope), float(fit.stderr), span)


def backlog(results: Iterable[RequestResult]) -> tuple[np.ndarray, np.ndarray]:
    """(times, backlog): at each request's intended start, the requests due by then that had not ended.

    The series starts once the first requests could have ended (the schedule's start plus the median
    request time), so that the ramp from an empty system is not read as growth. Closed-loop results
    (no intended start) give empty arrays.
    """
    rows = np.array([(r.intended_start, r.start_time + r.end_offset) for r in results
                     if r.intended_start is not None], dtype=float).reshape(-1, 2)
    if not len(rows):
        return np.array([]), np.array([])
    due, ends = np.sort(rows[:, 0]), np.sort(rows[:, 1])
    level = np.searchsorted(due, due, side="right") - np.searchsorted(ends, due, side="right")
    settled = due >= due[0] + float(np.median(rows[:, 1] - rows[:, 0]))
    return due[settled], level[settled].astype(float)


# --------------------------------------------------------------------------- decisions


@dataclass
class Look:
    """What one cell of a step measured."""

    requests: int
    met: int
    lag_p99_ms: float | None = None
    trends: list[Trend] = field(default_factory=list)
    prefix: str = ""
    goodput: float | None = None

    def record(self) -> dict:
        return {"requests": self.requests, "met": self.met, "lag_p99_ms": self.lag_p99_ms,
                "goodput": self.goodput, "prefix": self.prefix, "trends": [asdict(t) for t in self.trends]}

    @classmethod
    def from_dict(cls, data: dict) -> "Look":
        return cls(int(data.get("requests") or 0), int(data.get("met") or 0), data.get("lag_p99_ms"),
                   [Trend.from_dict(t) for t in data.get("trends") or []], data.get("prefix", ""),
                   data.get("goodput"))


@dataclass(frozen=True)
class Decision:
    """A step's decision from its looks so far: held, failed or undecided, why, the attainment's bounds (%), and
    for a held step its floor (the rate less the bound on its backlog's growth rate)."""

    decision: str
    reason: str
    bounds: tuple[float, float]
    floor: float | None = None


def decide(rate: float, looks: Sequence[Look], target: float, alphas: Sequence[float] | float,
           max_lag_ms: float | None) -> Decision:
    """The decision on the step at ``rate`` (see the module docstring): each look's tests at that look's level
    (``alphas[k]``, or one ``alpha`` for all), the attainment of all its requests at the last look's."""
    levels = [alphas] * len(looks) if isinstance(alphas, (int, float)) else list(alphas)[:len(looks)]
    met, n = sum(x.met for x in looks), sum(x.requests for x in looks)
    bounds = low, high = attainment_bounds(met, n, levels[-1] if levels else 1.0)
    if n == 0:
        return Decision(FAILED, "nothing measured", bounds)
    for look, alpha in zip(looks, levels):
        if max_lag_ms is not None and look.lag_p99_ms is not None and look.lag_p99_ms > max_lag_ms:
            return Decision(FAILED, f"dispatch lag p99 {look.lag_p99_ms:.0f} ms > {max_lag_ms:g} ms", bounds)
        for t in look.trends:
            if t.growing(alpha):
                return Decision(FAILED, f"{t.series} grows by {t.growth:.1f} over a look (Mann-Kendall "
                                        f"p={t.p_value:.2g})", bounds)
    if high < target:
        return Decision(FAILED, f"attainment <= {high:.1f} % < {target:g} %", bounds)
    if low < target:
        return Decision(UNDECIDED, f"attainment in [{low:.1f}, {high:.1f}] % around {target:g} %", bounds)
    growth = [b for x, alpha in zip(looks, levels) for t in x.trends
              if t.series == "backlog" and (b := t.slope_high(alpha)) is not None]
    if not growth:
        return Decision(UNDECIDED, f"attainment >= {low:.1f} %, but too few requests to test the queue", bounds)
    floor = rate - max(0.0, min(growth))
    return Decision(HELD, f"attainment >= {low:.1f} %; the backlog grows by <= {max(0.0, min(growth)):.2g} req/s",
                    bounds, floor)


def bracket(steps: Iterable[tuple[float, Decision]]) -> tuple[float, float | None, float | None]:
    """(highest rate held or 0, lowest rate above it that failed, lowest rate above it not held) of
    (rate, decision) pairs; None where there is none. Undecided steps count as not held."""
    steps = list(steps)
    held = max((r for r, d in steps if d.decision == HELD), default=0.0)
    failed = min((r for r, d in steps if d.decision == FAILED and r > held), default=None)
    not_held = min((r for r, d in steps if d.decision != HELD and r > held), default=None)
    return held, failed, not_held


def capacity_estimate(steps: Iterable[tuple[float, Decision]]) -> tuple[float | None, float, float | None]:
    """(value, interval low, interval high) from (rate, decision) pairs.

    The interval is [highest floor of a held step, lowest rate above the highest held that failed] (high None:
    none failed); the value is the middle of [highest rate held, lowest rate above it not held] (None when none
    held).
    """
    steps = list(steps)
    held, failed, not_held = bracket(steps)
    if held <= 0:
        return None, 0.0, failed
    floor = max(d.floor or 0.0 for _, d in steps if d.decision == HELD)
    return (held if not_held is None else (held + not_held) / 2), max(0.0, floor), failed


def interval_at(entry: dict, confidence: float) -> tuple[float, float | None]:
    """A ``capacity.jsonl`` search's interval at another confidence, its steps decided again at that level."""
    rule = entry.get("budget") or {}
    budget = Budget(int(rule.get("steps") or 1), int(rule.get("looks") or 1), confidence,
                    int(rule.get("tests") or TESTS_PER_LOOK), rule.get("spending") or UNIFORM)
    target = float(entry.get("slo_target") or 0.0)
    decided = [(float(s["rate"]), decide(float(s["rate"]), [Look.from_dict(x) for x in s.get("looks") or []],
                                         target, budget.alphas(int(s.get("index", j))), entry.get("max_lag_ms")))
               for j, s in enumerate(entry.get("steps") or []) if s.get("rate") is not None]
    _, low, high = capacity_estimate(decided)
    return low, high
