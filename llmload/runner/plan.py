"""What a run measures per server: the fixed cells (concurrency levels, offered rates) and the rate sweeps.

Cell file prefixes, relative to the run folder:

    <server>/<task>_<mode>_c<users>[_rep<k>]           closed loop, the matrix
    <server>/<task>_<mode>_r<rate>[_rep<k>]            open loop, --rates
    <server>/sweep/<task>_<mode>_c<pool>               saturation run of a sweep (or of a capacity search)
    <server>/sweep/<task>_<mode>_r<rate>[_rep<k>]      the sweep's rates
    <server>/capacity/<task>_<mode>_r<rate>            the capacity search's steps
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from llmload.core.runfiles import Cell


def round_rate(rate: float) -> float:
    """A rate to 4 significant digits: what Locust is given, the cell records and the file name shows."""
    return float(f"{rate:.4g}")


def sweep_rates(saturation: float, n: int) -> list[float]:
    """``n`` rates evenly spaced up to ``saturation``: saturation x 1/n, 2/n, ..., 1."""
    return [round_rate(saturation * i / n) for i in range(1, n + 1)]


def cell_prefix(server: str, task: str, mode: str, concurrency: int, rate: float | None = None, repeat: int = 0,
                repeats: int = 1, phase: str = "matrix") -> str:
    """The file prefix of one cell (see the module docstring)."""
    level = f"c{concurrency}" if rate is None else f"r{rate:g}"
    name = f"{task}_{mode}_{level}" + (f"_rep{repeat + 1}" if repeats > 1 else "")
    return f"{server}/{name}" if phase == "matrix" else f"{server}/{phase}/{name}"


@dataclass(frozen=True)
class Plan:
    """The load levels of a run, the same for every server (from the command line: :meth:`from_args`)."""

    tasks: tuple[str, ...]
    modes: tuple[str, ...]
    concurrency: tuple[int, ...]
    rates: tuple[float, ...]
    repeat: int
    pool: int
    sweep: int  # rates in the sweep (0: no sweep)
    find_capacity: bool
    capacity_steps: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Plan":
        return cls(tasks=tuple(args.tasks), modes=tuple(args.modes), concurrency=tuple(args.concurrency),
                   rates=tuple(round_rate(r) for r in args.rates or ()), repeat=args.repeat, pool=args.pool,
                   sweep=args.sweep or 0, find_capacity=args.find_capacity, capacity_steps=args.capacity_steps)

    @property
    def searches(self) -> bool:
        """True when each (task, mode) first measures the saturation throughput."""
        return bool(self.sweep or self.find_capacity)

    def cell(self, server: str, task: str, mode: str, concurrency: int, rate: float | None = None, repeat: int = 0,
             phase: str = "matrix") -> Cell:
        repeats = 1 if phase == "capacity" or (phase == "sweep" and rate is None) else self.repeat
        return Cell(server, task, mode, concurrency, cell_prefix(server, task, mode, concurrency, rate, repeat,
                                                                 repeats, phase),
                    rate=rate, repeat=repeat, phase=phase)

    def fixed_cells(self, server: str, task: str, mode: str) -> list[Cell]:
        """The cells known before anything runs: each level, each repeat in a row."""
        cells = [self.cell(server, task, mode, c, repeat=k) for c in self.concurrency for k in range(self.repeat)]
        cells += [self.cell(server, task, mode, self.pool, rate=r, repeat=k)
                  for r in self.rates for k in range(self.repeat)]
        return cells

    def saturation_cell(self, server: str, task: str, mode: str) -> Cell:
        """The closed loop at ``pool`` users whose request throughput is the saturation rate."""
        return self.cell(server, task, mode, self.pool, phase="sweep" if self.sweep else "capacity")

    def search_cells(self) -> int:
        """Most cells the sweep and capacity search of one (task, mode) run."""
        if not self.searches:
            return 0
        return 1 + self.sweep * self.repeat + (self.capacity_steps if self.find_capacity else 0)

    def cells_per_server(self) -> int:
        per_pair = (len(self.concurrency) + len(self.rates)) * self.repeat + self.search_cells()
        return per_pair * len(self.tasks) * len(self.modes)
