"""Confidence intervals for the suite's figures: blocks in time, order statistics, paired ratios, repeats.

Everything is numpy and vectorised: a bootstrap draws one ``(resamples, units)``
matrix of counts (how often each unit, a request or a prompt occurrence, is drawn)
and computes every replicate from it with matrix products and one cumulative sum,
in blocks of bounded size. Methods, formulas, their measured coverage and the
reasons for them are in ``docs/statistics.md``.

* :func:`interval` / :func:`intervals`: a :class:`Statistic` with its 95 % interval
  within one run: the circular block bootstrap over units in time order, blocks as
  long as :func:`block_length` finds the statistic's errors correlated (every
  inter-token gap moves with its request); without correlation a percentile of one
  value per unit takes the interval between two order statistics (:func:`order_interval`).
* :func:`ratio_interval`: ``top / bottom`` of the same statistic on two sets of
  requests, the same blocks of shared units (prompt occurrences) for both (paired),
  or each set on its own when they share none.
* :func:`widened`: an interval widened by a calibrated run-to-run spread.
* :func:`repeat_interval`, :func:`repeat_ratio_interval`: Student's / Welch's t over
  repeated runs (both levels of variation); :func:`block_ratio_interval`: a ratio's repeats
  paired by the block of the interleaved order they ran in (Student's t over each block's ratio).
* :func:`block_ratio_p_value`: the paired t-test behind :func:`block_ratio_interval`; :func:`holm`: Holm's
  step-down adjustment of a family of p-values (multiple comparisons).
* :func:`min_samples`: the minimum-sample rule.

Every :class:`Interval` says in ``covers`` which levels of variation it covers. A
report is reproducible: each interval's random stream is seeded with :data:`SEED`
and a key naming what it estimates (:func:`rng_for`).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import numpy as np

from llmload.core.metrics import ratio

CONFIDENCE = 0.95
#: The normal distribution's 97.5 % quantile.
Z975 = 1.959964
#: Bootstrap resamples per interval.
RESAMPLES = 2000
#: Base seed of every bootstrap (combined with the key of what is estimated).
SEED = 20261202
#: Fewest units for a mean, a rate or a bootstrap over shared units (on exponential data the bootstrap
#: of a mean covers 91 % at 10 values, 93 % at 15, 94-95 % from 36 on).
MIN_MEAN_SAMPLES = 10
#: What an interval covers (``Interval.covers``): the variation within one run (between requests and over
#: time), or that plus the run-to-run variation a calibration measured; ``across_repeats`` names the third.
WITHIN_RUN = "within-run only"
CALIBRATED = "within-run + calibrated run-to-run"
#: Block length over Politis & White's: theirs minimises the error of the variance estimate, and an interval's
#: coverage suffers more from the downward bias of short blocks (measured: docs/statistics.md).
BLOCK_FACTOR = 2
#: Samples of at least this many values take their bootstrap percentiles from a window of ranks.
WINDOW_VALUES = 4096
#: Values per bootstrap block (``resamples x values``), bounding memory to a few tens of MiB.
BLOCK = 1 << 21

#: Two-sided 97.5 % quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its 95 % interval; ``low``/``high`` are None where none can be given."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # values (or pairs of units, for a ratio) the estimate rests on
    covers: str = ""  # the levels of variation the interval covers (WITHIN_RUN, CALIBRATED, across_repeats)
    method: str = field(default="", compare=False)  # how it was made: "order statistics", "block bootstrap", ...

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def excludes_one(self) -> bool | None:
        """For a ratio: the interval excludes 1 (None without an interval)."""
        if not self.has_interval:
            return None
        return self.low > 1.0 or self.high < 1.0

    @property
    def significant(self) -> bool | None:
        """For a ratio: the interval excludes 1 and covers more than one run's own variation (None: not judged).

        Repeated runs of a cell differ by more than a within-run interval shows, so a
        ratio whose interval is :data:`WITHIN_RUN` is not called significant either way.
        """
        return None if self.covers == WITHIN_RUN else self.excludes_one


#: :attr:`Interval.method` of a percentile's distribution-free interval.
ORDER_STATISTICS = "order statistics"


def bootstrap_method(length: int) -> str:
    """:attr:`Interval.method` of a bootstrap in blocks of ``length`` units (1: independent units)."""
    return "bootstrap" if length == 1 else f"block bootstrap, blocks of {length}"


# --------------------------------------------------------------------------- the minimum-sample rule


def quantile_of(stat: str) -> float | None:
    """``p90`` -> 0.9, ``mean`` -> None; ValueError for anything else but ``max``/``rate``."""
    if stat.startswith("p"):
        return float(stat[1:]) / 100.0
    if stat in ("mean", "max", "rate"):
        return None
    raise ValueError(f"unknown statistic {stat!r}")


def min_samples(stat: str) -> int | None:
    """Fewest values for ``stat`` to be reported; None: never estimated with an interval (``max``).

    A percentile ``p`` needs ``n >= ln(0.025) / ln(max(p, 1 - p))``: the fewest values for
    which the sample's extremes bracket the true percentile with 95 % probability (2.5 %
    per side), i.e. ``n >= 3.7 / (1 - p)`` in the tail: p50 6, p90 36, p95 72, p99 368.
    Below it no interval exists whatever the method. Means and rates need
    :data:`MIN_MEAN_SAMPLES` units.
    """
    if stat == "max":
        return None
    q = quantile_of(stat)
    if q is None:
        return MIN_MEAN_SAMPLES
    top = max(q, 1.0 - q)
    if top >= 1.0:
        return None
    return math.ceil(math.log((1.0 - CONFIDENCE) / 2.0) / math.log(top) - 1e-9)


def has_enough(stat: str, n: int) -> bool:
    need = min_samples(stat)
    return need is not None and n >= need


# --------------------------------------------------------------------------- seeds


def rng_for(*key: Hashable) -> np.random.Generator:
    """The random stream of one estimate: :data:`SEED` and a CRC of ``key`` (the same key, the same draws)."""
    text = "\x1f".join(str(k) for k in key)
    return np.random.default_rng([SEED, zlib.crc32(text.encode("utf-8"))])


def resample_counts(units: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, units)`` counts: each row draws ``units`` units with replacement."""
    draws = rng.integers(0, units, size=(resamples, units))
    offsets = (np.arange(resamples) * units)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=resamples * units).reshape(resamples, units)
    return counts.astype(np.int32)


# --------------------------------------------------------------------------- blocks in time


def block_length(series: np.ndarray, factor: float = BLOCK_FACTOR) -> int:
    """The block length for ``series`` (in time order): ``factor`` times Politis & White's (2004).

    Politis & White's automatic length for the circular block bootstrap, with Patton,
    Politis & White's (2009) correction: ``b = (2 G^2 / D)^(1/3) n^(1/3)``, ``G`` and
    ``D = 4/3 g(0)^2`` from the autocovariances under a flat-top lag window of width ``M``,
    twice the first lag ``m`` after which ``K_n = max(5, log10 n)`` autocorrelations in a row
    are insignificant (``|r| < 2 sqrt(log10(n) / n)``). 1 when ``m`` is 0 (no autocorrelation
    found: the units are treated as independent). Rounded to the nearest of 1, 2, 3, 4, 6, 8, 12, 16,
    24, ... (figures of one cell then share few draws), at most ``min(3 sqrt(n), n / 3)``.
    """
    x = np.asarray(series, dtype=float)
    n = x.size
    if n < 8:
        return 1
    e = x - x.mean()
    gamma0 = float(e @ e) / n
    if gamma0 <= 0:
        return 1
    kn = max(5, math.ceil(math.log10(n)))
    m_max = min(math.ceil(math.sqrt(n)) + kn, n - 1)
    acv = np.array([float(e[k:] @ e[:n - k]) / n for k in range(m_max + 1)])
    small = np.abs(acv[1:] / gamma0) < 2.0 * math.sqrt(math.log10(n) / n)  # small[k - 1]: lag k insignificant
    first = next((m for m in range(small.size - kn + 1) if small[m:m + kn].all()), None)
    if first == 0:
        return 1
    width = min(m_max, 2 * first if first is not None else m_max)
    k = np.arange(1, width + 1)
    window = np.where(k / width <= 0.5, 1.0, 2.0 * (1.0 - k / width))  # the flat-top (trapezoid) window
    g0 = acv[0] + 2.0 * float((window * acv[k]).sum())
    big_g = 2.0 * float((window * k * acv[k]).sum())
    if g0 <= 0 or big_g == 0:
        return 1
    b = (2.0 * big_g ** 2 / (4.0 / 3.0 * g0 ** 2)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    b = max(1.0, factor * b)
    octave = 2.0 ** math.floor(math.log2(b))
    grid = min((octave, 1.5 * octave, 2.0 * octave), key=lambda g: abs(math.log(b / g)))
    return int(min(math.ceil(min(3.0 * math.sqrt(n), n / 3.0)), max(1, math.floor(grid))))


def block_counts(units: int, resamples: int, rng: np.random.Generator, length: int = 1,
                 method: str = "circular") -> np.ndarray:
    """``(resamples, units)`` counts of units in time order drawn in blocks of consecutive units.

    ``circular`` (Politis & Romano 1992): ``ceil(units / length)`` blocks of ``length`` from
    uniform starts, wrapping past the end, cut to ``units``; ``moving`` (Kuensch 1989): the
    same without wrapping (starts in ``0 .. units - length``); ``stationary`` (Politis &
    Romano 1994): geometric lengths of mean ``length``. ``length`` 1 is the bootstrap of
    independent units (:func:`resample_counts`).
    """
    if length <= 1 or units <= 1:
        return resample_counts(units, resamples, rng)
    length = min(length, units)
    blocks = -(-units // length)
    if method == "circular" and length > 4:  # each block adds 1 over its span: a difference array, one cumsum
        starts = rng.integers(0, units, size=(resamples, blocks))
        spans = np.full(blocks, length)
        spans[-1] = units - length * (blocks - 1)
        ends = starts + spans
        wraps = ends > units
        rows = np.arange(resamples)[:, None] * (units + 1)
        at = np.concatenate([(rows + starts).ravel(), (rows + np.where(wraps, units, ends)).ravel(),
                             (rows + np.where(wraps, 0, units)).ravel(), (rows + np.where(wraps, ends - units, units)).ravel()])
        sign = np.repeat(np.array([1.0, -1.0, 1.0, -1.0]), starts.size)
        diff = np.bincount(at, weights=sign, minlength=resamples * (units + 1)).reshape(resamples, units + 1)
        return np.cumsum(diff[:, :units], axis=1).astype(np.int32)
    if method == "stationary":
        starts = rng.integers(0, units, size=(resamples, units))
        restart = rng.random((resamples, units)) < 1.0 / length
        restart[:, 0] = True
        step = np.arange(units)
        last = np.maximum.accumulate(np.where(restart, step, 0), axis=1)
        draws = (np.take_along_axis(starts, last, axis=1) + step - last) % units
    else:
        starts = rng.integers(0, units if method == "circular" else units - length + 1, size=(resamples, blocks))
        draws = (starts[:, :, None] + np.arange(length)).reshape(resamples, -1)[:, :units] % units
    offsets = (np.arange(resamples) * units)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=resamples * units).reshape(resamples, units)
    return counts.astype(np.int32)


# --------------------------------------------------------------------------- statistics of weighted samples


def interpolation_ranks(total: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For quantile ``q`` of samples of ``total`` values (numpy's linear interpolation): the 0-based ranks
    ``lo`` and ``hi`` it lies between and the weight of ``hi``, ``frac``: ``v[lo] + frac * (v[hi] - v[lo])``."""
    h = (total - 1) * q
    lo = np.floor(h).astype(np.int64)
    return lo, np.minimum(lo + 1, total - 1), h - lo


def weighted_quantiles(sorted_values: np.ndarray, weights: np.ndarray, qs: Sequence[float]) -> np.ndarray:
    """``(len(qs), rows)`` quantiles of each row's sample, with numpy's linear interpolation.

    Row ``b`` is the sample holding ``sorted_values[j]`` ``weights[b, j]`` times (integer
    counts), so the result equals ``np.percentile`` of that expanded sample. Rows of
    total weight 0 give NaN.
    """
    rows, size = weights.shape
    cum = np.cumsum(weights, axis=1, dtype=np.int64)
    total = cum[:, -1]
    span = int(total.max()) + 1
    flat = (cum + (np.arange(rows, dtype=np.int64) * span)[:, None]).ravel()
    base = np.arange(rows, dtype=np.int64) * span
    out = np.empty((len(qs), rows))
    for i, q in enumerate(qs):
        lo, hi, frac = interpolation_ranks(total, q)
        j_lo = np.searchsorted(flat, base + lo, side="right") - np.arange(rows) * size
        j_hi = np.searchsorted(flat, base + hi, side="right") - np.arange(rows) * size
        j_lo = np.clip(j_lo, 0, size - 1)
        j_hi = np.clip(j_hi, 0, size - 1)
        out[i] = sorted_values[j_lo] + frac * (sorted_values[j_hi] - sorted_values[j_lo])
    out[:, total <= 0] = np.nan
    return out


@dataclass
class Statistic:
    """One figure of a set of requests, in a form the bootstrap can recompute on resamples.

    ``stat`` is ``mean``, ``pNN`` (of ``values``) or ``rate``: ``scale * sum(values) /
    sum(denominators)`` (throughputs: ``values`` = tokens or 1 per request,
    ``denominators`` = E2E, ``scale`` = the cell's effective concurrency). ``units``
    labels the unit each value belongs to (a request index, or a prompt id); values of
    one unit are resampled together. Without ``units`` every value is its own unit.
    """

    stat: str
    values: np.ndarray
    units: np.ndarray | None = None
    denominators: np.ndarray | None = None
    scale: float = 1.0
    order: np.ndarray | None = None  # the unit labels in time order (default: sorted, e.g. request indices)

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=float)
        if self.units is None:
            self.units = np.arange(self.values.size)
        self.units = np.asarray(self.units)
        labels = np.unique(self.units)
        self.order = labels if self.order is None else np.asarray(self.order)[np.isin(self.order, labels)]
        if self.denominators is not None:
            self.denominators = np.asarray(self.denominators, dtype=float)
        if self.stat != "rate":
            quantile_of(self.stat)

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def n_units(self) -> int:
        return int(np.unique(self.units).size) if self.n else 0

    @property
    def enough(self) -> bool:
        """The minimum-sample rule holds for the values; values in shared units also need enough units
        for the bootstrap (:data:`MIN_MEAN_SAMPLES`)."""
        if not has_enough(self.stat, self.n):
            return False
        return self.n_units >= MIN_MEAN_SAMPLES or (self.stat.startswith("p") and self.one_per_unit)

    @property
    def one_per_unit(self) -> bool:
        return self.n_units == self.n

    def point(self) -> float | None:
        if self.n == 0:
            return None
        if self.stat == "rate":
            den = float(self.denominators.sum())
            return self.scale * float(self.values.sum()) / den if den > 0 else None
        if self.stat == "mean":
            return float(self.values.mean())
        if self.stat == "max":
            return float(self.values.max())
        return float(np.percentile(self.values, 100.0 * quantile_of(self.stat)))

    def restricted(self, keep: np.ndarray) -> "Statistic":
        """The same statistic on the values whose unit is in ``keep``."""
        mask = np.isin(self.units, keep)
        return Statistic(self.stat, self.values[mask], self.units[mask],
                         None if self.denominators is None else self.denominators[mask], self.scale,
                         self.order[np.isin(self.order, keep)])

    def influence(self, order: np.ndarray | None = None) -> np.ndarray:
        """Each unit's contribution to the statistic's error, units in time order (``order``: another order).

        A mean: ``sum(values) - mean * count``; a rate: ``sum(values) - ratio * sum(denominators)``; a
        percentile ``q``: ``count(values <= estimate) - q * count`` (the linearised statistic; its
        autocorrelation sets the block length).
        """
        order = self.order if order is None else order
        labels = np.unique(self.units)
        column = np.searchsorted(labels, self.units)
        count = np.bincount(column, minlength=labels.size).astype(float)
        if self.stat == "rate":
            den = np.bincount(column, weights=self.denominators, minlength=labels.size)
            total = float(den.sum())
            level = float(self.values.sum()) / total if total > 0 else 0.0
            contribution = np.bincount(column, weights=self.values, minlength=labels.size) - level * den
        elif self.stat == "mean":
            contribution = np.bincount(column, weights=self.values, minlength=labels.size) - self.values.mean() * count
        else:
            q = quantile_of(self.stat)
            below = (self.values <= np.percentile(self.values, 100.0 * q)).astype(float)
            contribution = np.bincount(column, weights=below, minlength=labels.size) - q * count
        return contribution[np.searchsorted(labels, order)]

    def log_influence(self, order: np.ndarray | None = None) -> np.ndarray | None:
        """:meth:`influence` on the scale of the statistic's log (what each unit moves ``log`` of it by), for a
        mean or a rate; None for a percentile (that needs the density at it)."""
        if self.stat not in ("mean", "rate"):
            return None
        total = float(self.values.sum())  # d log(sum / count) = influence / sum, and the same for a rate
        return self.influence(order) / total if total else None

    def block_length(self, order: np.ndarray | None = None, factor: float = BLOCK_FACTOR) -> int:
        """:func:`block_length` of the statistic's :meth:`influence` series."""
        return block_length(self.influence(order), factor) if self.n else 1

    def replicates(self, unit_labels: np.ndarray, counts: np.ndarray, weights: np.ndarray | None = None
                   ) -> np.ndarray:
        """The statistic on each resample: ``counts[b, u]`` draws of unit ``unit_labels[u]`` in row ``b``
        (``weights``: the same counts as floats, when the caller has them)."""
        if self.stat not in ("mean", "rate"):
            return self.quantile_replicates(unit_labels, counts, [quantile_of(self.stat)], weights)[0]
        column = np.searchsorted(unit_labels, self.units)
        size = unit_labels.size
        numerator = np.bincount(column, weights=self.values, minlength=size)  # per unit: sums
        if self.stat == "mean":
            denominator, scale = np.bincount(column, minlength=size).astype(float), 1.0
        else:
            denominator, scale = np.bincount(column, weights=self.denominators, minlength=size), self.scale
        w = counts.astype(float) if weights is None else weights  # float: BLAS for the products
        top, bottom = w @ numerator, w @ denominator
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(bottom > 0, scale * top / bottom, np.nan)

    def quantile_replicates(self, unit_labels: np.ndarray, counts: np.ndarray, qs: Sequence[float],
                            weights: np.ndarray | None = None) -> np.ndarray:
        """``(len(qs), resamples)`` quantiles of ``values`` on each resample (values sorted once).

        Large samples (:data:`WINDOW_VALUES` values or more) go through :func:`windowed_quantile`,
        which gives the same numbers from a window of ranks around each quantile.
        """
        order = np.argsort(self.values, kind="stable")
        values = self.values[order]
        column = np.searchsorted(unit_labels, self.units)[order]
        rows = counts.shape[0]
        out = np.empty((len(qs), rows))
        if self.n >= WINDOW_VALUES:
            weights = counts.astype(float) if weights is None else weights
            for i, q in enumerate(qs):
                out[i] = windowed_quantile(values, column, counts, q, weights)
            return out
        step = max(1, BLOCK // max(1, self.n))
        for start in range(0, rows, step):
            out[:, start:start + step] = weighted_quantiles(values, counts[start:start + step][:, column], qs)
        return out


def windowed_quantile(sorted_values: np.ndarray, column: np.ndarray, counts: np.ndarray, q: float,
                      weights: np.ndarray | None = None) -> np.ndarray:
    """:func:`weighted_quantiles` of one ``q`` for unit counts ``counts[b, u]`` (value ``j`` belongs to unit
    ``column[j]``), from the ranks near ``q`` only.

    Each row's weight below the window is one product with the units' value counts below
    it; the cumulative sum runs over the window (5 standard deviations of the quantile's
    rank under cluster resampling, ``sqrt(sum_u (below_u - q * n_u) ** 2)``, each side). Rows whose quantile falls outside it are
    computed in full, so the result is exact.
    """
    rows, units = counts.shape
    size = sorted_values.size
    per_unit = np.bincount(column, minlength=units).astype(float)
    w = counts.astype(float) if weights is None else weights
    total = np.rint(w @ per_unit).astype(np.int64)
    lo, hi, frac = interpolation_ranks(total, q)
    centre = int(q * (size - 1))
    below = np.bincount(column[:centre], minlength=units)  # each unit's values under the pooled quantile
    spread = math.sqrt(float(((below - q * per_unit) ** 2).sum()))  # std of the rank under cluster resampling
    half = int(5 * spread) + 64
    j0, j1 = max(0, centre - half), min(size, centre + half + 1)
    base = np.rint(w @ np.bincount(column[:j0], minlength=units).astype(float)).astype(np.int64)
    out = np.full(rows, np.nan)
    inside = np.zeros(rows, dtype=bool)
    step = max(1, BLOCK // max(1, j1 - j0))
    for start in range(0, rows, step):
        sl = slice(start, start + step)
        cum = np.cumsum(counts[sl][:, column[j0:j1]], axis=1, dtype=np.int32) + base[sl, None]
        fits = (base[sl] <= lo[sl]) & (cum[:, -1] > hi[sl]) & (total[sl] > 0)
        j_lo = j0 + (cum <= lo[sl, None]).sum(axis=1)
        j_hi = j0 + (cum <= hi[sl, None]).sum(axis=1)
        j_lo, j_hi = np.clip(j_lo, 0, size - 1), np.clip(j_hi, 0, size - 1)
        value = sorted_values[j_lo] + frac[sl] * (sorted_values[j_hi] - sorted_values[j_lo])
        out[sl] = np.where(fits, value, np.nan)
        inside[sl] = fits
    rest = np.nonzero(~inside & (total > 0))[0]
    for start in range(0, rest.size, max(1, BLOCK // size)):
        chunk = rest[start:start + max(1, BLOCK // size)]
        out[chunk] = weighted_quantiles(sorted_values, counts[chunk][:, column], [q])[0]
    return out


def expanded_alpha(units: float) -> float:
    """The tail probability of each side of the expanded percentile interval (Hesterberg 2015).

    The plain percentile interval is too narrow in small samples (the bootstrap's spread
    is that of ``n`` values around their own mean); the expanded one takes the
    bootstrap quantiles at ``Phi(-sqrt(n / (n - 1)) * t(n - 1))`` instead of 2.5 %,
    which tends to 2.5 % as ``n`` grows (0.6 % at n = 8, 1.9 % at n = 30).
    """
    alpha = (1.0 - CONFIDENCE) / 2.0
    if units < 2:
        return alpha
    z = math.sqrt(units / (units - 1)) * t_quantile(max(1, round(units - 1)))
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def order_interval(values: np.ndarray, q: float) -> tuple[float | None, float | None]:
    """The distribution-free 95 % interval of the ``q`` quantile of independent values.

    With ``K ~ Binomial(n, q)`` values below the true quantile, ``[X(l), X(u)]`` (order
    statistics) covers it with probability ``P(l <= K < u)``: ``l`` is the largest rank with
    ``P(K < l) <= 2.5 %``, ``u`` the smallest with ``P(K >= u) <= 2.5 %``. (None, None) when
    the sample is too small for either (see :func:`min_samples`).
    """
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n == 0 or not 0.0 < q < 1.0:
        return None, None
    k = np.arange(n)
    log_pmf = n * math.log1p(-q) + np.concatenate(
        ([0.0], np.cumsum(np.log((n - k) / (k + 1.0)) + math.log(q / (1.0 - q)))))
    cdf = np.cumsum(np.exp(log_pmf - log_pmf.max()))
    cdf = cdf / cdf[-1]  # cdf[j] = P(K <= j), j = 0..n
    alpha = (1.0 - CONFIDENCE) / 2.0
    below = np.concatenate(([0.0], cdf[:-1]))  # below[r] = P(K < r), r = 0..n
    lows = np.nonzero(below[1:] <= alpha)[0]  # ranks r = 1..n with P(K < r) <= alpha
    above = 1.0 - below  # above[r] = P(K >= r)
    highs = np.nonzero(above[1:] <= alpha)[0]
    if lows.size == 0 or highs.size == 0:
        return None, None
    low_rank, high_rank = int(lows[-1]) + 1, int(highs[0]) + 1
    return float(x[low_rank - 1]), float(x[high_rank - 1])


def _percentile_interval(replicates: np.ndarray, units: float) -> tuple[float | None, float | None]:
    finite = replicates[np.isfinite(replicates)]
    if finite.size < 0.9 * replicates.size or finite.size == 0:
        return None, None
    alpha = expanded_alpha(units)
    low, high = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(low), float(high)


def time_counts(labels: np.ndarray, order: np.ndarray, resamples: int, rng: np.random.Generator,
                length: int, method: str = "circular") -> np.ndarray:
    """:func:`block_counts` over ``order`` (unit labels in time order) as columns of ``labels`` (sorted)."""
    drawn = block_counts(order.size, resamples, rng, length, method)
    counts = np.empty_like(drawn)
    counts[:, np.searchsorted(labels, order)] = drawn
    return counts


def _blocks(units: int, length: int) -> float:
    """Independent pieces a resample is made of (the expanded interval's sample size)."""
    return units / max(1, length)


def interval(statistic: Statistic, key: Sequence[Hashable] = (), resamples: int = RESAMPLES,
             blocks: bool = True, **options) -> Interval:
    """The statistic with its 95 % within-run interval (:func:`intervals` of one statistic)."""
    return intervals({statistic.stat: statistic}, (*key, statistic.stat), resamples, blocks,
                     **options)[statistic.stat]


def intervals(statistics: dict[str, Statistic], key: Sequence[Hashable] = (), resamples: int = RESAMPLES,
              blocks: bool = True, method: str = "circular", factor: float = BLOCK_FACTOR
              ) -> dict[str, Interval]:
    """Each statistic with its 95 % within-run interval; statistics of one block length share one draw.

    Units are resampled in circular blocks of consecutive units in time order (the default
    order: sorted labels, i.e. request indices by start time), of the length
    :func:`block_length` finds in each statistic's :meth:`~Statistic.influence` series;
    length 1 (no autocorrelation found) is the bootstrap of independent units, and a
    percentile of one value per unit then takes the order-statistic interval. ``blocks=False``:
    every statistic as if its units were independent (the method before blocks); ``method``
    and ``factor``: the other block schemes and lengths the coverage benchmark compares. Below
    the minimum-sample rule the value is None; a ``max`` gets its value and no interval.
    Percentiles of the same values with the same block length share one sort.
    """
    result: dict[str, Interval] = {}
    pending: dict[int, dict[str, Statistic]] = {}
    for name, s in statistics.items():
        if s.stat == "max":
            result[name] = Interval(s.point(), n=s.n)
            continue
        if not s.enough:
            result[name] = Interval(None, n=s.n)
            continue
        length = s.block_length(factor=factor) if blocks else 1
        if s.stat.startswith("p") and s.one_per_unit and length == 1:
            low, high = order_interval(s.values, quantile_of(s.stat))
            result[name] = Interval(s.point(), low, high, s.n, WITHIN_RUN, ORDER_STATISTICS)
        else:
            pending.setdefault(length, {})[name] = s
    for length, group in pending.items():
        order = np.unique(np.concatenate([s.order for s in group.values()]))
        rng = rng_for(*key) if length == 1 else rng_for(*key, "blocks", length)
        counts = time_counts(order, order, resamples, rng, length, method)
        weights = counts.astype(float)
        shared: dict[int, list[str]] = {}
        for name, s in group.items():
            if s.stat in ("mean", "rate"):
                low, high = _percentile_interval(s.replicates(order, counts, weights), _blocks(s.n_units, length))
                result[name] = Interval(s.point(), low, high, s.n, WITHIN_RUN, bootstrap_method(length))
            else:
                shared.setdefault(id(s.values), []).append(name)
        for names in shared.values():
            first = group[names[0]]
            reps = first.quantile_replicates(order, counts, [quantile_of(group[n].stat) for n in names], weights)
            for name, row in zip(names, reps):
                low, high = _percentile_interval(row, _blocks(first.n_units, length))
                result[name] = Interval(group[name].point(), low, high, group[name].n, WITHIN_RUN,
                                        bootstrap_method(length))
    return {name: result[name] for name in statistics}


def ratio_interval(top: Statistic, bottom: Statistic, key: Sequence[Hashable] = (),
                   resamples: int = RESAMPLES, paired: bool = True, draws: dict | None = None,
                   blocks: bool = True) -> tuple[Interval, bool]:
    """``top / bottom`` with its 95 % within-run interval, and whether it was paired.

    Paired (the default, where the two share unit labels: a prompt and its occurrence):
    both are restricted to the shared units and every resample draws the same blocks of
    units, consecutive in ``top``'s time order, for both, so a prompt's own difficulty and
    what the two runs went through at the same point of their sequence cancel out of the
    ratio; the block length is the longer of the two sides'. Otherwise each side is
    resampled on its own, in its own blocks. The ratio needs both sides to pass the
    minimum-sample rule (counted in shared units when paired). ``draws``: a dict shared by
    several ratios of the same two sets of requests, so that they reuse one draw per set
    of shared units and block length.
    """

    common = np.intersect1d(np.unique(top.units), np.unique(bottom.units)) if paired else np.array([])
    is_paired = common.size > 0
    if is_paired:
        order = top.order[np.isin(top.order, common)]
        top, bottom = top.restricted(common), bottom.restricted(common)
    n = int(common.size) if is_paired else min(top.n_units, bottom.n_units)
    value = ratio(top.point(), bottom.point())
    if not (top.enough and bottom.enough) or value is None:
        return Interval(None, n=n), is_paired
    if is_paired:
        length = 1
        if blocks:  # the ratio's own errors (a prompt's cost cancels from them) and each side's
            up, down = top.log_influence(order), bottom.log_influence(order)
            own = block_length(up - down) if up is not None and down is not None else 1
            length = max(own, top.block_length(order), bottom.block_length(order))
        cache_key = (common.size, hash(common.tobytes()), length)
        if draws is not None and cache_key in draws:
            counts, weights = draws[cache_key]
        else:
            rng = rng_for(*key, "ratio") if length == 1 else rng_for(*key, "ratio", length)
            counts = time_counts(common, order, resamples, rng, length)
            weights = counts.astype(float)
            if draws is not None:
                draws[cache_key] = (counts, weights)
        up, down = top.replicates(common, counts, weights), bottom.replicates(common, counts, weights)
    else:
        rng = rng_for(*key, top.stat, "ratio")
        lengths = [s.block_length() if blocks else 1 for s in (top, bottom)]
        length = max(lengths)
        up, down = (s.replicates(np.sort(s.order), time_counts(np.sort(s.order), s.order, resamples, rng, k))
                    for s, k in zip((top, bottom), lengths))
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.where(down != 0, up / down, np.nan)
    low, high = _percentile_interval(reps, _blocks(n, length))
    method = bootstrap_method(length) + (" over shared units" if is_paired else " of each side")
    return Interval(value, low, high, n, WITHIN_RUN, method), is_paired


def widened(iv: Interval, spread: float, df: float | None = None, covers: str = CALIBRATED,
            within: float = 0.0) -> Interval:
    """``iv`` widened for run-to-run variation of relative standard deviation ``spread`` (``df`` degrees of freedom).

    On the log scale (a positive interval) each side's within-run standard error
    ``s = half-width / 1.96`` adds in quadrature with ``spread``, and the side becomes
    ``t(df') * sqrt(s^2 + spread^2)`` with Satterthwaite's ``df' = df * (1 + s^2 / spread^2)^2``
    (the within-run part counted as known; the normal quantile without ``df``). With
    ``within``, the typical within-run error of the runs ``spread`` was measured on, each side
    is at least ``t(df) * sqrt(within^2 + spread^2)``: how far one run's figure falls from
    the mean over runs, whatever its own (estimated) interval says. For a ratio ``spread``
    is the root of both sides' squared spreads (:func:`combined_spread`). An interval
    reaching 0 or below is widened the same way on the linear scale, by ``spread * |value|``.
    """
    if not iv.has_interval or iv.value is None or spread < 0:
        return iv
    floor = (t_quantile(max(1, int(df))) if df else Z975) * math.hypot(within, spread)

    def side(half: float, scale: float) -> float:
        s2, extra = (half / Z975) ** 2, (spread * scale) ** 2
        if extra == 0:
            return max(half, floor * scale)
        q = t_quantile(int(min(1e6, df * (1.0 + s2 / extra) ** 2))) if df else Z975
        return max(q * math.sqrt(s2 + extra), floor * scale)

    method = f"{iv.method}, widened by a calibrated run-to-run spread"
    if iv.value > 0 and iv.low > 0:
        return Interval(iv.value, iv.value * math.exp(-side(math.log(iv.value / iv.low), 1.0)),
                        iv.value * math.exp(side(math.log(iv.high / iv.value), 1.0)), iv.n, covers, method)
    return Interval(iv.value, iv.value - side(iv.value - iv.low, abs(iv.value)),
                    iv.value + side(iv.high - iv.value, abs(iv.value)), iv.n, covers, method)


def combined_spread(*spreads: tuple[float, float]) -> tuple[float, float]:
    """``(spread, df)`` of a ratio (or product) of figures with independent run-to-run spreads ``(sd, df)``:
    the root of the summed variances, with Satterthwaite's degrees of freedom."""
    total = sum(sd ** 2 for sd, _ in spreads)
    if total == 0:
        return 0.0, max(df for _, df in spreads)
    return math.sqrt(total), total ** 2 / sum(sd ** 4 / df for sd, df in spreads if sd > 0)


# --------------------------------------------------------------------------- repeats


def t_quantile(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (table to 30, then an expansion)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = Z975
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def across_repeats(*counts: int) -> str:
    """The ``covers`` label of an interval over repeated runs: ``across 3 repeats``, ``across 3 + 4 repeats``."""
    return f"across {' + '.join(str(c) for c in counts)} repeats"


def repeat_interval(values: Sequence[float]) -> Interval:
    """Mean of per-repeat figures with Student's t 95 % interval (none with fewer than 2 repeats).

    Each repeat's figure varies by its own run's within-run error and by the run-to-run
    variation, so the spread of the figures holds both levels (the random-effects model
    with equal within-run errors: Kalibera & Jones 2013; Georges et al. 2007). Where that
    interval would reach 0 or below while every figure is positive (a latency whose runs
    differ several-fold), it is taken on the log scale instead (the figures' spread as a
    factor), so that it stays positive.
    """
    array = np.asarray([v for v in values if v is not None], dtype=float)
    if array.size == 0:
        return Interval(None)
    mean = float(array.mean())
    if array.size < 2:
        return Interval(mean, n=1)
    q = t_quantile(array.size - 1) / math.sqrt(array.size)
    low, high = mean - q * float(array.std(ddof=1)), mean + q * float(array.std(ddof=1))
    method = "Student's t over repeats"
    if low <= 0 < array.min():
        logs = np.log(array)
        centre, half = float(logs.mean()), q * float(logs.std(ddof=1))
        low, high = min(math.exp(centre - half), mean), max(math.exp(centre + half), mean)
        method += " (log scale)"
    return Interval(mean, low, high, int(array.size), across_repeats(array.size), method)


def repeat_ratio_interval(top: Sequence[float], bottom: Sequence[float]) -> Interval:
    """``mean(top) / mean(bottom)`` of per-repeat figures, with Welch's t interval of the log ratio.

    The repeats are the replication unit, so run-to-run noise is in the interval itself.
    Needs two positive figures on each side.
    """

    a = np.asarray([v for v in top if v is not None], dtype=float)
    b = np.asarray([v for v in bottom if v is not None], dtype=float)
    if a.size < 2 or b.size < 2 or (a <= 0).any() or (b <= 0).any():
        return Interval(ratio(float(a.mean()) if a.size else None, float(b.mean()) if b.size else None),
                        n=int(min(a.size, b.size)))
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / a.size, lb.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va ** 2 / (a.size - 1) if va else 0.0) + (vb ** 2 / (b.size - 1) if vb else 0.0)) \
        if va + vb > 0 else float(a.size + b.size - 2)
    half = t_quantile(max(1, int(df))) * se
    centre = float(la.mean() - lb.mean())
    return Interval(ratio(float(a.mean()), float(b.mean())), math.exp(centre - half), math.exp(centre + half),
                    int(min(a.size, b.size)), across_repeats(a.size, b.size), "Welch's t over repeats")


def paired_repeats(count: int) -> str:
    """The ``covers`` label of a ratio over repeats paired by block: ``across 3 paired repeats``."""
    return f"across {count} paired repeats"


def block_ratio_interval(top: Mapping[Hashable, float], bottom: Mapping[Hashable, float]) -> Interval:
    """``top / bottom`` over the blocks both sides ran a repeat in, with Student's t interval of each block's log
    ratio (the paired t of a randomised complete block design: Box, Hunter & Hunter 2005).

    ``top`` and ``bottom`` map a block to that side's figure in it. Whatever the machine did during a block (a
    slow spell, other work) moves both sides' figures, and their ratio cancels it; the interval covers the
    variation that is left from block to block (within-run and run-to-run). The value is the ratio of the
    means over those blocks. Needs two blocks both sides ran, with positive figures.
    """
    blocks = [k for k in top if k in bottom and top[k] is not None and bottom[k] is not None]
    a = np.asarray([top[k] for k in blocks], dtype=float)
    b = np.asarray([bottom[k] for k in blocks], dtype=float)
    value = ratio(float(a.mean()), float(b.mean())) if blocks else None
    if len(blocks) < 2 or (a <= 0).any() or (b <= 0).any():
        return Interval(value, n=len(blocks))
    logs = np.log(a) - np.log(b)
    half = t_quantile(logs.size - 1) * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    centre = float(logs.mean())
    return Interval(value, math.exp(centre - half), math.exp(centre + half), int(logs.size),
                    paired_repeats(logs.size), "Student's t over paired blocks")


def block_ratio_p_value(top: Mapping[Hashable, float], bottom: Mapping[Hashable, float]) -> float | None:
    """The two-sided p-value of the paired t-test that :func:`block_ratio_interval` inverts: whether the mean of
    each block's log ratio is 0 (its interval excludes 1 exactly when this is below 0.05). None with fewer than
    two blocks both sides ran with positive figures; 0 when every block's ratio is the same and not 1."""
    blocks = [k for k in top if k in bottom and top[k] is not None and bottom[k] is not None]
    a = np.asarray([top[k] for k in blocks], dtype=float)
    b = np.asarray([bottom[k] for k in blocks], dtype=float)
    if len(blocks) < 2 or (a <= 0).any() or (b <= 0).any():
        return None
    logs = np.log(a) - np.log(b)
    spread = float(logs.std(ddof=1))
    if spread == 0.0:
        return 1.0 if float(logs.mean()) == 0.0 else 0.0
    from scipy import stats as scipy_stats  # scipy: only where a p-value is asked for

    t = float(logs.mean()) / (spread / math.sqrt(logs.size))
    return float(2.0 * scipy_stats.t.sf(abs(t), logs.size - 1))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (Holm 1979): the i-th smallest of m p-values times (m - i + 1), made
    non-decreasing in that order and capped at 1; a hypothesis is rejected at level alpha when its adjusted
    p-value is at most alpha, which keeps the chance of any false rejection in the family at most alpha whatever
    the dependence between the tests. None (a comparison that could not be tested) stays None and does not
    count in m."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return adjusted
