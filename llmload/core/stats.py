"""Confidence intervals for the suite's figures: seeded bootstrap, paired ratios, intervals over repeats.

Everything is numpy and vectorised: one bootstrap draws a ``(resamples, units)``
matrix of counts (how often each unit, a request or a prompt id, is drawn) and
computes every replicate of a statistic from it with matrix products and one
cumulative sum, in blocks of bounded size. The method, formulas and the
reasoning behind them are in ``docs/statistics.md``.

* :func:`interval`: the percentile bootstrap of a :class:`Statistic` over its
  units (requests; every inter-token gap of a request moves with it).
* :func:`ratio_interval`: ``top / bottom`` of the same statistic on two sets of
  requests, resampling the prompt ids both answered (paired), or each set on
  its own when they share none.
* :func:`repeat_interval`: Student's t interval of a mean over repeated runs.
* :func:`min_samples`: the minimum-sample rule (a statistic of fewer values
  gets no value in the report, only ``n``).

A report is reproducible: each interval's random stream is seeded with
:data:`SEED` and a key naming what it estimates (:func:`rng_for`).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

CONFIDENCE = 0.95
#: Bootstrap resamples per interval.
RESAMPLES = 2000
#: Base seed of every bootstrap (combined with the key of what is estimated).
SEED = 20261202
#: ``k`` of the minimum-sample rule: a percentile ``p`` needs ``n >= k / min(p, 1 - p)`` values.
TAIL_SAMPLES = 3.0
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

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def significant(self) -> bool | None:
        """For a ratio: the interval excludes 1 (None without an interval)."""
        if not self.has_interval:
            return None
        return self.low > 1.0 or self.high < 1.0


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

    A percentile ``p`` needs ``n >= 3 / min(p, 1 - p)``: the smallest ``n`` for which the
    sample's extreme values bracket the true percentile with 95 % probability
    (``p**n <= 0.05``, the rule of three). Means, medians and rates need 6:
    p50 and means 6, p90 30, p95 60, p99 300.
    """
    if stat == "max":
        return None
    q = quantile_of(stat)
    tail = 0.5 if q is None else min(q, 1.0 - q)
    if tail <= 0:
        return None
    return math.ceil(TAIL_SAMPLES / tail - 1e-9)


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
    return np.bincount((draws + offsets).ravel(), minlength=resamples * units).reshape(resamples, units)


# --------------------------------------------------------------------------- statistics of weighted samples


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
        h = (total - 1) * q
        lo = np.floor(h).astype(np.int64)
        frac = h - lo
        hi = np.minimum(lo + 1, total - 1)
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

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=float)
        if self.units is None:
            self.units = np.arange(self.values.size)
        self.units = np.asarray(self.units)
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
        """The minimum-sample rule holds for the values and for the units they come in."""
        return has_enough(self.stat, self.n) and (self.n_units >= (min_samples("mean") or 0))

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
                         None if self.denominators is None else self.denominators[mask], self.scale)

    def replicates(self, unit_labels: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The statistic on each resample: ``counts[b, u]`` draws of unit ``unit_labels[u]`` in row ``b``."""
        if self.stat not in ("mean", "rate"):
            return self.quantile_replicates(unit_labels, counts, [quantile_of(self.stat)])[0]
        column = np.searchsorted(unit_labels, self.units)
        rows = counts.shape[0]
        step = max(1, BLOCK // max(1, self.n))
        out = np.empty(rows)
        for start in range(0, rows, step):
            w = counts[start:start + step][:, column].astype(float)  # float: BLAS for the products
            den = w.sum(axis=1) if self.stat == "mean" else w @ self.denominators
            scale = 1.0 if self.stat == "mean" else self.scale
            with np.errstate(divide="ignore", invalid="ignore"):
                out[start:start + step] = np.where(den > 0, scale * (w @ self.values) / den, np.nan)
        return out

    def quantile_replicates(self, unit_labels: np.ndarray, counts: np.ndarray, qs: Sequence[float]) -> np.ndarray:
        """``(len(qs), resamples)`` quantiles of ``values`` on each resample (one sort, one cumulative sum)."""
        order = np.argsort(self.values, kind="stable")
        values = self.values[order]
        column = np.searchsorted(unit_labels, self.units)[order]
        rows = counts.shape[0]
        step = max(1, BLOCK // max(1, self.n))
        out = np.empty((len(qs), rows))
        for start in range(0, rows, step):
            out[:, start:start + step] = weighted_quantiles(values, counts[start:start + step][:, column], qs)
        return out


def _percentile_interval(replicates: np.ndarray) -> tuple[float | None, float | None]:
    finite = replicates[np.isfinite(replicates)]
    if finite.size < 0.9 * replicates.size or finite.size == 0:
        return None, None
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.percentile(finite, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return float(low), float(high)


def interval(statistic: Statistic, key: Sequence[Hashable] = (), resamples: int = RESAMPLES) -> Interval:
    """The statistic with its 95 % percentile-bootstrap interval over its units.

    Below the minimum-sample rule the value is None (``n`` says how many there were);
    a ``max`` gets its value and no interval.
    """
    n = statistic.n
    if statistic.stat == "max":
        return Interval(statistic.point(), n=n)
    if not statistic.enough:
        return Interval(None, n=n)
    labels = np.unique(statistic.units)
    counts = resample_counts(labels.size, resamples, rng_for(*key, statistic.stat))
    low, high = _percentile_interval(statistic.replicates(labels, counts))
    return Interval(statistic.point(), low, high, n)


def intervals(statistics: dict[str, Statistic], key: Sequence[Hashable] = (),
              resamples: int = RESAMPLES) -> dict[str, Interval]:
    """Several statistics of the same units, all from one set of resamples (one draw, one seed).

    Percentiles of the same values array are computed together (one sort, one cumulative sum).
    """
    result: dict[str, Interval] = {}
    pending: dict[str, Statistic] = {}
    for name, s in statistics.items():
        if s.stat == "max":
            result[name] = Interval(s.point(), n=s.n)
        elif not s.enough:
            result[name] = Interval(None, n=s.n)
        else:
            pending[name] = s
    if pending:
        labels = np.unique(np.concatenate([s.units for s in pending.values()]))
        counts = resample_counts(labels.size, resamples, rng_for(*key))
        shared: dict[int, list[str]] = {}
        for name, s in pending.items():
            if s.stat in ("mean", "rate"):
                low, high = _percentile_interval(s.replicates(labels, counts))
                result[name] = Interval(s.point(), low, high, s.n)
            else:
                shared.setdefault(id(s.values), []).append(name)
        for names in shared.values():
            first = pending[names[0]]
            reps = first.quantile_replicates(labels, counts, [quantile_of(pending[n].stat) for n in names])
            for name, row in zip(names, reps):
                low, high = _percentile_interval(row)
                result[name] = Interval(pending[name].point(), low, high, pending[name].n)
    return {name: result[name] for name in statistics}


def ratio_interval(top: Statistic, bottom: Statistic, key: Sequence[Hashable] = (),
                   resamples: int = RESAMPLES, paired: bool = True) -> tuple[Interval, bool]:
    """``top / bottom`` with its 95 % interval, and whether it was paired.

    Paired (the default, where the two share unit labels, i.e. prompt ids): both are
    restricted to the shared units and every resample draws the same units for both,
    so a prompt's own difficulty cancels out of the ratio. Otherwise each side is
    resampled on its own. The ratio needs both sides to pass the minimum-sample rule
    (counted in shared units when paired).
    """
    from llmload.core.metrics import ratio

    common = np.intersect1d(np.unique(top.units), np.unique(bottom.units)) if paired else np.array([])
    is_paired = common.size > 0
    if is_paired:
        top, bottom = top.restricted(common), bottom.restricted(common)
    n = int(common.size) if is_paired else min(top.n_units, bottom.n_units)
    value = ratio(top.point(), bottom.point())
    if not (top.enough and bottom.enough) or value is None:
        return Interval(None, n=n), is_paired
    rng = rng_for(*key, top.stat, "ratio")
    if is_paired:
        counts = resample_counts(common.size, resamples, rng)
        up, down = top.replicates(common, counts), bottom.replicates(common, counts)
    else:
        top_labels, bottom_labels = np.unique(top.units), np.unique(bottom.units)
        up = top.replicates(top_labels, resample_counts(top_labels.size, resamples, rng))
        down = bottom.replicates(bottom_labels, resample_counts(bottom_labels.size, resamples, rng))
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = np.where(down != 0, up / down, np.nan)
    low, high = _percentile_interval(reps)
    return Interval(value, low, high, n), is_paired


# --------------------------------------------------------------------------- repeats


def t_quantile(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (table to 30, then an expansion)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def repeat_interval(values: Sequence[float]) -> Interval:
    """Mean of per-repeat figures with Student's t 95 % interval (none with fewer than 2 repeats)."""
    array = np.asarray([v for v in values if v is not None], dtype=float)
    if array.size == 0:
        return Interval(None)
    mean = float(array.mean())
    if array.size < 2:
        return Interval(mean, n=1)
    half = t_quantile(array.size - 1) * float(array.std(ddof=1)) / math.sqrt(array.size)
    return Interval(mean, mean - half, mean + half, int(array.size))
