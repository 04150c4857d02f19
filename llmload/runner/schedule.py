"""The order a run's cells run in: jobs interleaved in seeded random blocks, so that drift spreads over every server.

A :class:`Job` is a sequence of cells decided one at a time: a load level and
its repeats (which, with ``--target-ci``, stop once converged), a saturation
run (which then starts its sweep's levels and its capacity search), a capacity
search (one cell per look). Each is a generator that yields its next cell and
receives that cell's result; when it ends it may return new jobs.

``--order interleaved`` (the default) runs *blocks*: in each, every job still
running gives its next cell, and the block's cells run in a random order drawn
from ``--order-seed`` and the block's number. A job's cells thus spread over
the whole run, each block holding one repeat of every level of every server.
Within a block the points (task, mode, load level) come in a random order and
each point's servers run back to back, in a random order, so the cells a ratio
pairs run close in time (a randomised complete block design with the repeat
and the point as the block).
When the servers cannot all be up at once, each block keeps a server's cells
together (servers in a random order, each one's cells in a random order), so a
server starts once per block. ``--order sequential`` is the order of old: each
server in turn, each level's repeats in a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator

import numpy as np

from llmload.core.runfiles import Cell

ORDERS = ("interleaved", "sequential")


@dataclass(eq=False)
class Job:
    """A generator of cells (see the module docstring) with the most cells it may still run (``planned``)."""

    server: str
    steps: Generator[Cell, Any, "list[Job] | None"]
    planned: int
    pending: Cell | None = None

    def start(self) -> None:
        """Take the first cell."""
        self.pending = next(self.steps)

    def advance(self, result: Any) -> list["Job"] | None:
        """Send the pending cell's result; None while the job goes on, else the jobs it started (maybe none)."""
        self.planned -= 1
        try:
            self.pending = self.steps.send(result)
            return None
        except StopIteration as end:
            self.pending = None
            return list(end.value or [])

    def close(self) -> None:
        """End the job where it is (its generator's ``finally`` runs)."""
        self.steps.close()
        self.pending = None


@dataclass(frozen=True)
class Order:
    """How a block's cells are ordered: ``kind`` (:data:`ORDERS`), the seed, and whether servers stay grouped."""

    kind: str = "interleaved"
    seed: int = 0
    grouped: bool = False

    @property
    def interleaved(self) -> bool:
        return self.kind == "interleaved"

    def block(self, jobs: list[Job], number: int) -> list[Job]:
        """The jobs whose pending cells make block ``number`` (1, 2, ...), in the order they run."""
        if not self.interleaved:
            return jobs[:1]
        rng = np.random.default_rng([self.seed, number])
        if not self.grouped:
            return self._by_point(jobs, rng)
        servers = list(dict.fromkeys(job.server for job in jobs))
        ordered: list[Job] = []
        for server in (servers[i] for i in rng.permutation(len(servers))):
            mine = [job for job in jobs if job.server == server]
            ordered += [mine[i] for i in rng.permutation(len(mine))]
        return ordered

    @staticmethod
    def _by_point(jobs: list[Job], rng) -> list[Job]:
        """The points in a random order, and at each point its servers' cells back to back in a random order:
        the cells a ratio pairs run a few cells apart, not up to a block apart."""
        points: dict[tuple, list[Job]] = {}
        for job in jobs:
            points.setdefault(job.pending.point.shared, []).append(job)
        groups = list(points.values())
        ordered: list[Job] = []
        for g in rng.permutation(len(groups)):
            ordered += [groups[g][i] for i in rng.permutation(len(groups[g]))]
        return ordered

    def runs(self, names: list[str], blocks: int) -> list[tuple[str, int]]:
        """The order of whole runs of ``names`` (a tune's configurations), each run ``blocks`` times: (name,
        block) pairs. Interleaved: block after block, each a random order of every name drawn from the seed and
        the block's number as :meth:`block` draws it; sequential: each name's blocks in a row, in the order given."""
        if not self.interleaved:
            return [(name, block) for name in names for block in range(1, blocks + 1)]
        out: list[tuple[str, int]] = []
        for block in range(1, blocks + 1):
            rng = np.random.default_rng([self.seed, block])
            out += [(names[i], block) for i in rng.permutation(len(names))]
        return out

    def describe(self) -> str:
        if not self.interleaved:
            return "sequential (each server in turn, each level's repeats in a row)"
        return (f"interleaved in random blocks (seed {self.seed}; "
                + ("each block's cells grouped by server)" if self.grouped
                   else "each point's servers back to back, in a random order)"))
