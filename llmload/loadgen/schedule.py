"""The open loop's schedule: when each request is meant to go out, independent of the server's answers.

Inter-arrival gaps are drawn from one seeded generator: ``constant`` (exactly
``1/R`` apart), ``poisson`` (exponential gaps, mean ``1/R``) or ``gamma``
(shape ``K``, mean ``1/R``; ``K = 1`` is poisson, smaller is burstier), as
``vllm bench serve --request-rate R --burstiness K`` draws them. Request ``k``
(counted over all users and workers) is due ``sum(gaps[:k])`` seconds after the
schedule's start, so the schedule is the same however the requests are shared
out, and a slow server never slows it down: a request that finds every user
busy goes out late, and its dispatch lag shows it.

A :class:`TraceSchedule` is a replayed trace's: request ``k`` is due at its
own offset (its time in the trace, scaled), and there are only as many as the trace holds.
"""

from __future__ import annotations

import random


class Schedule:
    """Intended start times ``time_of(0), time_of(1), ...`` (epoch seconds), drawn in order and kept."""

    def __init__(self, rate: float, arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0):
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if arrival not in ("constant", "poisson", "gamma"):
            raise ValueError(f"unknown arrival law {arrival!r}")
        self.rate, self.arrival, self.burstiness = rate, arrival, burstiness
        self._random = random.Random(seed)
        self.start: float | None = None
        self._next_index = 0
        self._next_offset = 0.0

    #: How many requests the schedule holds (None: no end).
    length: int | None = None

    def gap(self) -> float:
        """The next inter-arrival gap in seconds."""
        if self.arrival == "constant":
            return 1.0 / self.rate
        if self.arrival == "poisson":
            return self._random.expovariate(self.rate)
        shape = self.burstiness
        return self._random.gammavariate(shape, 1.0 / (self.rate * shape))

    def begin(self, start: float) -> None:
        """Anchor the schedule: request 0 is due at ``start`` (epoch seconds)."""
        if self.start is None:
            self.start = start

    def next(self) -> tuple[int, float]:
        """The next request's index and intended start (call :meth:`begin` first)."""
        assert self.start is not None, "begin() first"
        index, offset = self._next_index, self._next_offset
        self._next_index += 1
        self._next_offset += self.gap()
        return index, self.start + offset


class TraceSchedule(Schedule):
    """A trace's intended starts: request ``k`` is due ``offsets[k]`` seconds after the start (no more than them)."""

    def __init__(self, offsets: list[float]):
        self.offsets = tuple(offsets)
        self.length = len(self.offsets)
        self.start = None
        self._next_index = 0

    def next(self) -> tuple[int, float]:
        assert self.start is not None, "begin() first"
        index = self._next_index
        self._next_index += 1
        return index, self.start + self.offsets[index]
