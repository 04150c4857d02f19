"""Live figures of a run, fixed-size and mergeable: run-so-far per task and a sliding window of the last seconds.

:class:`LiveBoard` is fed every result where it is measured (standalone, or
each worker of a distributed run) and merged where the run is watched (the
master merges its workers' boards). Its parts, each mergeable and carried
between processes as a plain dict (:meth:`LiveBoard.to_wire`):

* ``tasks``: one :class:`~llmload.core.metrics.LiveStats` per task (the
  run-so-far figures; merged for the total when asked);
* ``buckets``: one :class:`Bucket` per second (requests, failures, tokens, SLO
  tallies, a sketch per windowed latency and the sums of the latency's parts
  where the server timed its requests), the sliding window's material, so
  every read costs the same at 1 k and 10 M results;
* ``counts``: run-wide tallies (:class:`Counts`: requests late on the schedule,
  successes, the first failure's time);
* ``histograms``: where the Prometheus export is on, fixed-edge latency
  histograms per task (:mod:`~llmload.loadgen.histograms`);
* ``reach``: per process, how long it found the server unreachable
  (:class:`Reach`); the board reports the longest;
* ``clock``: per process that sends requests, its probe of its own timing
  error (:class:`~llmload.core.clienterror.ClockReading`); the run's
  client-error bound is the worst process's.

The first four are *additive*: a worker sends what it counted since its last
report, and the master adds it. ``reach`` and ``clock`` are *per-process
gauges*: each report carries the worker's current value, and the master keeps
the latest per worker. A new live figure is one more part of either kind.

Requests count in the second they ended; their tokens in the second each token
arrived (so a request still in flight is not counted yet). On a master the
board is complete only up to its workers' last reports (:attr:`LiveBoard.complete_until`),
so its window and its history points end there.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from ddsketch import DDSketch

from llmload.core.clienterror import ClockReading, figures_of, summary_block
from llmload.core.metrics import (STREAM_PARTS, SKETCH_RELATIVE_ACCURACY, SYNC_PARTS, UNREACHABLE, LiveStats,
                                  RequestMetrics, RequestResult, RunSummary, sketch_from_bytes, sketch_to_bytes)
from llmload.loadgen.histograms import TaskHistograms

WINDOW_S = 10
#: Latencies the window tracks, by metric name.
WINDOW_METRICS = ("ttft", "tpot", "e2e", "dispatch_lag")
#: The latency's parts the window averages (where the server timed its requests): the web UI's stacked bar.
WINDOW_PARTS = tuple(dict.fromkeys(STREAM_PARTS + SYNC_PARTS))
#: Seconds of history kept for the web UI's charts (one point per second).
HISTORY_S = 3600
#: Seconds of buckets kept behind the newest complete second (the window, a master's lag, and a margin).
KEEP_S = 3 * WINDOW_S
#: Most history points one snapshot adds when it catches up (a master whose workers report every 3 s).
CATCH_UP_POINTS = 30


def _sketches() -> dict[str, DDSketch]:
    return {m: DDSketch(SKETCH_RELATIVE_ACCURACY) for m in WINDOW_METRICS}


@dataclass
class Bucket:
    """One second of the run: what ended in it, and the tokens that arrived in it."""

    second: int
    requests: int = 0
    failures: int = 0
    tokens: int = 0
    slo_met: int = 0
    slo_judged: int = 0
    sketches: dict = field(default_factory=_sketches)
    parts: dict = field(default_factory=dict)  # part -> [sum of seconds, count] (WINDOW_PARTS)

    def add_part(self, name: str, value: float, count: int = 1) -> None:
        total = self.parts.setdefault(name, [0.0, 0])
        total[0] += value
        total[1] += count

    def merge(self, other: "Bucket") -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.tokens += other.tokens
        self.slo_met += other.slo_met
        self.slo_judged += other.slo_judged
        for name, sketch in other.sketches.items():
            if sketch.count:
                self.sketches[name].merge(sketch)
        for name, (total, count) in other.parts.items():
            self.add_part(name, total, count)

    def to_wire(self) -> dict:
        return {"second": self.second, "requests": self.requests, "failures": self.failures, "tokens": self.tokens,
                "slo_met": self.slo_met, "slo_judged": self.slo_judged,
                "sketches": {name: sketch_to_bytes(s) for name, s in self.sketches.items() if s.count},
                "parts": {name: list(total) for name, total in self.parts.items()}}

    @classmethod
    def from_wire(cls, data: dict) -> "Bucket":
        bucket = cls(data["second"], data["requests"], data["failures"], data["tokens"], data["slo_met"],
                     data["slo_judged"])
        for name, blob in data["sketches"].items():
            if name in bucket.sketches:
                bucket.sketches[name] = sketch_from_bytes(blob)
        for name, (total, count) in data.get("parts", {}).items():
            if name in WINDOW_PARTS:
                bucket.add_part(name, total, count)
        return bucket


@dataclass
class Counts:
    """Run-wide tallies: additive (``first_failure`` merges by the earliest)."""

    late: int = 0  # open loop: tickets already due when a user took them (every user was busy)
    successes: int = 0  # warm-up included: what tells that a server answers
    first_failure: float | None = None  # epoch seconds a failure was counted first (warm-up included)

    def merge(self, other: "Counts") -> None:
        self.late += other.late
        self.successes += other.successes
        if other.first_failure is not None:
            self.first_failure = other.first_failure if self.first_failure is None else \
                min(self.first_failure, other.first_failure)

    def to_wire(self) -> dict:
        return {"late": self.late, "successes": self.successes, "first_failure": self.first_failure}

    @classmethod
    def from_wire(cls, data: dict) -> "Counts":
        return cls(data["late"], data["successes"], data["first_failure"])


@dataclass
class Reach:
    """One process's view of the server's reachability: seconds it was unreachable, and an outage still open.

    An outage runs from the first refused or reset request after a success to the end of the next success.
    """

    closed_s: float = 0.0
    down_since: float | None = None

    def track(self, result: RequestResult) -> None:
        if UNREACHABLE in result.flags:
            if self.down_since is None:
                self.down_since = result.start_time
        elif result.success and self.down_since is not None:
            self.closed_s += max(result.start_time + result.end_offset - self.down_since, 0.0)
            self.down_since = None

    def so_far(self, now: float) -> float:
        return self.closed_s + (max(now - self.down_since, 0.0) if self.down_since is not None else 0.0)

    def to_wire(self) -> dict:
        return {"closed_s": self.closed_s, "down_since": self.down_since}

    @classmethod
    def from_wire(cls, data: dict) -> "Reach":
        return cls(data["closed_s"], data["down_since"])


class LiveBoard:
    """Run-so-far and sliding-window figures, per task and in total; mergeable (:meth:`merge`, :meth:`to_wire`)."""

    def __init__(self, window_s: int = WINDOW_S, histograms: bool = False):
        self.window_s = window_s
        self.tasks: dict[str, LiveStats] = {}
        self.keeps_histograms = histograms  # count them here (merged ones are kept anyway)
        self.histograms: dict[str, TaskHistograms] = {}
        self.counts = Counts()
        self.reach: dict[str, Reach] = {"": Reach()}  # process -> its reachability ('' = this one)
        self.clock: dict[str, ClockReading] = {}  # process -> its probe's reading ('' = this one, if it probes)
        self._buckets: dict[int, Bucket] = {}
        self.history: deque[dict] = deque(maxlen=HISTORY_S)
        #: Epoch seconds up to which the board holds every result (None: now; a master: its workers' last reports).
        self.complete_until: float | None = None

    @property
    def now(self) -> float:
        return self.complete_until if self.complete_until is not None else time.time()

    def _bucket(self, second: int) -> Bucket | None:
        """The bucket of ``second`` if it is recent enough to matter (the window plus a margin)."""
        oldest = int(self.now) - KEEP_S
        if second < oldest:
            return None
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = Bucket(second)
            for old in [s for s in self._buckets if s < oldest]:
                del self._buckets[old]
        return bucket

    def add(self, result: RequestResult, metrics: RequestMetrics) -> None:
        """Count one completed result (a warm-up result counts only in reachability, successes and failures)."""
        self.reach[""].track(result)
        if result.success:
            self.counts.successes += 1
        elif result.failed and self.counts.first_failure is None:
            self.counts.first_failure = time.time()
        if result.warmup:
            return
        stats = self.tasks.get(result.task)
        if stats is None:
            stats = self.tasks[result.task] = LiveStats()
        stats.add(result, metrics)
        if self.keeps_histograms and result.success:
            self.histograms.setdefault(result.task, TaskHistograms()).add(metrics)
        end = result.start_time + (metrics.e2e if result.success else result.end_offset)
        bucket = self._bucket(int(end))
        if bucket is None:
            return
        if result.cancelled:
            return  # the window counts answered requests: a cancel is neither a success nor a failure
        bucket.requests += 1
        if result.slo_ok is not None:
            bucket.slo_judged += 1
            bucket.slo_met += bool(result.slo_ok)
        if not result.success:
            bucket.failures += 1
            return
        for name in WINDOW_METRICS:
            value = getattr(metrics, name)
            if value is not None:
                bucket.sketches[name].add(max(value, 0.0))
        for name in WINDOW_PARTS:
            value = getattr(metrics, name)
            if value is not None:
                bucket.add_part(name, value)  # a sum: a negative residual counts as measured
        offsets = result.token_offsets if result.mode == "stream" else ()
        if offsets and len(offsets) == metrics.output_tokens:
            for offset in offsets:
                token_bucket = self._bucket(int(result.start_time + offset))
                if token_bucket is not None:
                    token_bucket.tokens += 1
        else:  # sync, or a server whose chunks hold several tokens: all at the end
            bucket.tokens += metrics.output_tokens

    # ------------------------------------------------------------------ merging

    def merge(self, other: "LiveBoard", node: str, latest: bool = True) -> None:
        """Add ``other`` (what worker ``node`` counted since its last report); its reachability becomes the node's
        (``latest``: this report is the node's newest)."""
        for task, stats in other.tasks.items():
            mine = self.tasks.get(task)
            if mine is None:
                self.tasks[task] = stats
            else:
                mine.merge(stats)
        for task, histograms in other.histograms.items():
            self.histograms.setdefault(task, TaskHistograms()).merge(histograms)
        self.counts.merge(other.counts)
        for second, bucket in other._buckets.items():
            mine = self._bucket(second)
            if mine is not None:
                mine.merge(bucket)
        if latest or node not in self.reach:
            self.reach[node] = other.reach[""]
        if "" in other.clock and (latest or node not in self.clock):
            self.clock[node] = other.clock[""]

    def to_wire(self) -> dict:
        """Every part as plain data (numbers, strings, bytes) for Locust's messages."""
        wire = {"tasks": {task: stats.to_wire() for task, stats in self.tasks.items()},
                "buckets": [b.to_wire() for b in self._buckets.values() if b.requests or b.tokens],
                "counts": self.counts.to_wire(), "reach": self.reach[""].to_wire()}
        if "" in self.clock:
            wire["clock"] = self.clock[""].to_wire()
        if self.histograms:
            wire["histograms"] = {task: h.to_wire() for task, h in self.histograms.items()}
        return wire

    @classmethod
    def from_wire(cls, data: dict) -> "LiveBoard":
        board = cls()
        board.tasks = {task: LiveStats.from_wire(stats) for task, stats in data["tasks"].items()}
        board.counts = Counts.from_wire(data["counts"])
        board.reach[""] = Reach.from_wire(data["reach"])
        if data.get("clock"):
            board.clock[""] = ClockReading.from_wire(data["clock"])
        for task, histograms in data.get("histograms", {}).items():
            board.histograms[task] = TaskHistograms.from_wire(histograms)
        for bucket in data["buckets"]:
            board._buckets[bucket["second"]] = Bucket.from_wire(bucket)
        return board

    # ------------------------------------------------------------------ reading

    def unreachable_so_far(self) -> float:
        """Seconds the server refused or reset connections, as long as one process saw it (an open outage counts
        up to now)."""
        now = time.time()
        return max(reach.so_far(now) for reach in self.reach.values())

    def failure_counts(self) -> tuple[int, int]:
        """(requests ended, of them failed) over every task so far, cancelled and warm-up requests left out: what
        --max-error-rate watches (cheap: no sketch is merged)."""
        judged = sum(s.requests - (s.cancelled or 0) for s in self.tasks.values())
        return judged, sum(s.failures for s in self.tasks.values())

    def client_error(self, total: RunSummary | None = None) -> dict | None:
        """The run's client-error bound (its worst process's) against its TTFT p50 and ITL mean, with the flags
        (:func:`~llmload.core.clienterror.summary_block`). None before any probe sample."""
        total = total or self.total()
        return summary_block(self.clock, figures_of(total), total.get("dispatch_lag", "p99"))

    def summaries(self) -> dict[str, RunSummary]:
        """Run-so-far summary per task, and over all tasks (key ``"all"``) when there are several."""
        out = {task: stats.summary() for task, stats in sorted(self.tasks.items())}
        if len(self.tasks) > 1:
            out["all"] = self.total()
        return out

    def total(self) -> RunSummary:
        total = LiveStats()
        for stats in self.tasks.values():
            total.merge(stats)
        return total.summary()

    def _window(self, now: float) -> tuple[int, list[Bucket]]:
        """The last complete second before ``now`` and the buckets of the ``window_s`` seconds up to it."""
        last = int(now) - 1  # the current second is still filling
        seconds = range(last - self.window_s + 1, last + 1)
        return last, [self._buckets[s] for s in seconds if s in self._buckets]

    def parts(self, now: float | None = None) -> dict:
        """The mean of each part of the latency (ms) over the window's requests the server timed, and how many
        requests each mean is of: ``{"parts_ms": {"queue": 12.5, ...}, "counts": {"queue": 40, ...}}``."""
        _, buckets = self._window(self.now if now is None else now)
        merged = Bucket(0)
        for b in buckets:
            for name, (total, count) in b.parts.items():
                merged.add_part(name, total, count)
        return {"parts_ms": {name: round(1000.0 * total / count, 2) for name, (total, count) in merged.parts.items()},
                "counts": {name: count for name, (_, count) in merged.parts.items()}}

    def window(self, now: float | None = None) -> dict:
        """Figures over the last ``window_s`` complete seconds: rates, latency percentiles (ms), SLO."""
        now = self.now if now is None else now
        last, buckets = self._window(now)
        merged = _sketches()
        requests = failures = tokens = met = judged = 0
        for b in buckets:
            requests, failures, tokens = requests + b.requests, failures + b.failures, tokens + b.tokens
            met, judged = met + b.slo_met, judged + b.slo_judged
            for name, sketch in b.sketches.items():
                if sketch.count:
                    merged[name].merge(sketch)

        def q(name: str, quantile: float) -> float | None:
            sketch = merged[name]
            return None if not sketch.count else round(sketch.get_quantile_value(quantile) * 1000.0, 2)

        first = min(self._buckets, default=last)
        span = float(max(1, min(self.window_s, last - first + 1)))  # the run's first seconds: what they cover
        return {"time": round(now, 3), "window_s": self.window_s,
                "requests_per_s": round((requests - failures) / span, 3),
                "failures_per_s": round(failures / span, 3), "output_tokens_per_s": round(tokens / span, 2),
                "ttft_p50_ms": q("ttft", 0.5), "ttft_p95_ms": q("ttft", 0.95), "tpot_p50_ms": q("tpot", 0.5),
                "e2e_p50_ms": q("e2e", 0.5), "dispatch_lag_p99_ms": q("dispatch_lag", 0.99),
                "slo_attainment_pct": round(100.0 * met / judged, 2) if judged else None,
                "goodput_per_s": round(met / span, 3) if judged else None}

    def snapshot(self, users: int, extra: dict | None = None) -> list[dict]:
        """Add history points up to :attr:`now` (the window there, the user count, ``extra`` such as server RSS).

        One point a call where the board is complete up to now; a master's board, complete only up to its
        workers' last reports, gets one point per second up to there (the seconds a report brought).
        """
        until = self.now
        last = self.history[-1]["time"] if self.history else None
        if self.complete_until is None or last is None:
            times = [until] if last is None or until > last else []
        else:
            count = min(int(until - last), CATCH_UP_POINTS)
            times = [until - k for k in range(count - 1, -1, -1)] if count > 0 else []
        points = [{**self.window(t), "users": users, **(extra or {})} for t in times]
        self.history.extend(points)
        return points


def finite(value: float | None) -> float | None:
    """``value`` unless it is NaN or infinite (JSON cannot hold those)."""
    return value if value is not None and math.isfinite(value) else None
