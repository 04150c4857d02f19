"""A server of known capacity, simulated: the raw logs its cells would give, with no process (for the search tests).

K first-come-first-served slots of a fixed service time S hold exactly K / S requests/s, as the mock engine with
``--mock-slots`` does (server/engines/mock.py). :func:`open_loop` gives an open-loop cell's results (constant or
Poisson arrivals, each request sent a little late by a seeded jitter, judged against an e2e SLO from its intended
start); :func:`closed_loop` a closed loop's (the saturation run).
"""

from __future__ import annotations

import numpy as np

from llmload.core.metrics import RequestResult, summarize
from llmload.core.sequential import Look, backlog, trend


class SlotServer:
    """``slots`` FIFO slots of ``service_s`` seconds each."""

    def __init__(self, slots: int, service_s: float):
        self.slots, self.service_s = slots, service_s
        self.free = np.zeros(slots)

    @property
    def capacity(self) -> float:
        return self.slots / self.service_s

    def serve(self, sent: float) -> float:
        """When a request that arrives at ``sent`` ends."""
        slot = int(np.argmin(self.free))
        self.free[slot] = max(sent, self.free[slot]) + self.service_s
        return float(self.free[slot])


def open_loop(server: SlotServer, rate: float, n: int, rng: np.random.Generator, slo_s: float,
              poisson: bool = False, jitter_s: float = 0.002) -> list[RequestResult]:
    """``n`` requests offered at ``rate`` to an idle ``server``."""
    server.free[:] = 0.0
    gaps = rng.exponential(1.0 / rate, n) if poisson else np.full(n, 1.0 / rate)
    due = 1000.0 + np.cumsum(gaps) - gaps[0]
    out = []
    for i, t in enumerate(due):
        sent = t + abs(rng.normal(0.0, jitter_s))
        end = server.serve(sent)
        out.append(RequestResult(f"r{i}", "qa", "chat", "stream", start_time=sent, end_offset=end - sent,
                                 output_tokens=1, intended_start=float(t), slo_ok=end - t <= slo_s))
    return out


def closed_loop(server: SlotServer, users: int, n: int, rng: np.random.Generator, think_s: float = 0.001,
                spawn_s: float = 0.0) -> list[RequestResult]:
    """``n`` requests from ``users`` users (started evenly over ``spawn_s``), each sending its next one when its
    last one ends."""
    server.free[:] = 0.0
    ready = 1000.0 + np.arange(users) * spawn_s / users + np.abs(rng.normal(0.0, 0.002, users))  # next sends
    out = []
    for i in range(n):
        user = int(np.argmin(ready))
        sent = float(ready[user])
        end = server.serve(sent)
        ready[user] = end + think_s
        out.append(RequestResult(f"c{i}", "qa", "chat", "stream", start_time=sent, end_offset=end - sent,
                                 output_tokens=1))
    return out


def look_at(results: list[RequestResult], prefix: str = "") -> Look:
    """What the runner's :func:`llmload.runner.capacity.look_of` reads from a cell's results (no monitor)."""
    summary = summarize(results)
    return Look(len(results), sum(1 for r in results if r.slo_ok), None, [trend("backlog", *backlog(results))],
                prefix, summary.goodput)
