"""Live figures of a run, in fixed-size state: run-so-far per task and a sliding window of the last seconds.

:class:`LiveBoard` is fed every result as it completes (on the master when
distributed). Run-so-far figures are one :class:`~llmload.core.metrics.LiveStats`
per task (merged for the total when asked); the window is a ring of one-second
buckets with a sketch per latency, so every read costs the same at 1 k and 10 M
results. Requests count in the second they ended; their tokens in the second
each token arrived (so a request still in flight is not counted yet).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from ddsketch import DDSketch

from llmload.core.metrics import (SKETCH_RELATIVE_ACCURACY, LiveStats, RequestMetrics, RequestResult, RunSummary)

WINDOW_S = 10
#: Latencies the window tracks, by metric name.
WINDOW_METRICS = ("ttft", "tpot", "e2e", "dispatch_lag")
#: Seconds of history kept for the web UI's charts (one point per second).
HISTORY_S = 3600


@dataclass
class Bucket:
    """One second of the run: what ended in it, and the tokens that arrived in it."""

    second: int
    requests: int = 0
    failures: int = 0
    tokens: int = 0
    slo_met: int = 0
    slo_judged: int = 0
    sketches: dict = field(default_factory=lambda: {m: DDSketch(SKETCH_RELATIVE_ACCURACY) for m in WINDOW_METRICS})


class LiveBoard:
    """Run-so-far and sliding-window figures, per task and in total."""

    def __init__(self, window_s: int = WINDOW_S):
        self.window_s = window_s
        self.tasks: dict[str, LiveStats] = {}
        self._buckets: dict[int, Bucket] = {}
        self.history: deque[dict] = deque(maxlen=HISTORY_S)
        self.unreachable_s = 0.0
        self._down_since: float | None = None

    def _bucket(self, second: int) -> Bucket | None:
        """The bucket of ``second`` if it is recent enough to matter (the window plus a margin)."""
        now = int(time.time())
        if second < now - 2 * self.window_s:
            return None
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = Bucket(second)
            for old in [s for s in self._buckets if s < now - 2 * self.window_s]:
                del self._buckets[old]
        return bucket

    def add(self, result: RequestResult, metrics: RequestMetrics) -> None:
        """Count one completed result (warm-up results count nowhere)."""
        self._track_reachability(result)
        if result.warmup:
            return
        stats = self.tasks.get(result.task)
        if stats is None:
            stats = self.tasks[result.task] = LiveStats()
        stats.add(result, metrics)
        end = result.start_time + (metrics.e2e if result.success else result.end_offset)
        bucket = self._bucket(int(end))
        if bucket is None:
            return
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
        offsets = result.token_offsets if result.mode == "stream" else ()
        if offsets and len(offsets) == metrics.output_tokens:
            for offset in offsets:
                token_bucket = self._bucket(int(result.start_time + offset))
                if token_bucket is not None:
                    token_bucket.tokens += 1
        else:  # sync, or a server whose chunks hold several tokens: all at the end
            bucket.tokens += metrics.output_tokens

    def _track_reachability(self, result: RequestResult) -> None:
        """Sum the time between the first refused/reset request after a success and the next success."""
        end = result.start_time + result.end_offset
        if "unreachable" in result.flags:
            if self._down_since is None:
                self._down_since = result.start_time
        elif result.success and self._down_since is not None:
            self.unreachable_s += max(end - self._down_since, 0.0)
            self._down_since = None

    def unreachable_so_far(self) -> float:
        """Seconds the server refused or reset connections (an outage still going on counts up to now)."""
        open_outage = time.time() - self._down_since if self._down_since is not None else 0.0
        return self.unreachable_s + open_outage

    # ------------------------------------------------------------------ reading

    def summaries(self) -> dict[str, RunSummary]:
        """Run-so-far summary per task, and over all tasks (key ``"all"``) when there are several."""
        out = {task: stats.summary() for task, stats in sorted(self.tasks.items())}
        if len(self.tasks) > 1:
            total = LiveStats()
            for stats in self.tasks.values():
                total.merge(stats)
            out["all"] = total.summary()
        return out

    def total(self) -> RunSummary:
        total = LiveStats()
        for stats in self.tasks.values():
            total.merge(stats)
        return total.summary()

    def window(self, now: float | None = None) -> dict:
        """Figures over the last ``window_s`` complete seconds: rates, latency percentiles (ms), SLO."""
        now = time.time() if now is None else now
        last = int(now) - 1  # the current second is still filling
        seconds = range(last - self.window_s + 1, last + 1)
        buckets = [self._buckets[s] for s in seconds if s in self._buckets]
        merged = {m: DDSketch(SKETCH_RELATIVE_ACCURACY) for m in WINDOW_METRICS}
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

    def snapshot(self, users: int, extra: dict | None = None) -> dict:
        """Record one point of history (the window now, the user count, and ``extra`` such as server RSS)."""
        point = {**self.window(), "users": users, **(extra or {})}
        self.history.append(point)
        return point


def finite(value: float | None) -> float | None:
    """``value`` unless it is NaN or infinite (JSON cannot hold those)."""
    return value if value is not None and math.isfinite(value) else None
