"""What a run measures per server: the load levels and their repeats, the sweeps and the capacity searches.

Cell file prefixes, relative to the run folder:

    <server>/<task>_<mode>_c<users>[_rep<k>]           closed loop, the matrix
    <server>/<task>_<mode>_r<rate>[_rep<k>]            open loop, --rates
    <server>/sweep/<task>_<mode>_c<pool>               saturation run of a sweep (or of a capacity search)
    <server>/sweep/<task>_<mode>_r<rate>[_rep<k>]      the sweep's rates
    <server>/capacity/<task>_<mode>_r<rate>[_look<k>]  the capacity search's steps (a later look: more requests)
    <server>/trace/<task>_<mode>_c<pool>[_rep<k>]      the --trace replayed (under the first task)

``_rep<k>`` appears when a cell may run more than once (``--repeat`` above 1, or ``--target-ci``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmload.core.points import TRACE_PHASE, Load, Point
from llmload.core.runfiles import Cell

if TYPE_CHECKING:  # for the annotation only: a plan needs none of the options' imports
    from llmload.runner.options import RunnerSettings


def round_rate(rate: float) -> float:
    """A rate to 4 significant digits: what Locust is given, the cell records and the file name shows."""
    return float(f"{rate:.4g}")


def sweep_rates(saturation: float, n: int) -> list[float]:
    """``n`` rates evenly spaced up to ``saturation``: saturation x 1/n, 2/n, ..., 1."""
    return [round_rate(saturation * i / n) for i in range(1, n + 1)]


def cell_prefix(point: Point, repeat: int = 0, repeats: int = 1) -> str:
    """The file prefix of one cell of ``point`` (see the module docstring)."""
    if point.phase == "capacity":
        suffix = f"_look{repeat + 1}" if repeat else ""
    else:
        suffix = f"_rep{repeat + 1}" if repeats > 1 else ""
    name = f"{point.task}_{point.mode}_{point.load.tag}{suffix}"
    return f"{point.server}/{name}" if point.phase == "matrix" else f"{point.server}/{point.phase}/{name}"


@dataclass(frozen=True)
class Plan:
    """The load levels of a run, the same for every server (from the runner's settings: :meth:`from_settings`)."""

    tasks: tuple[str, ...]
    modes: tuple[str, ...]
    concurrency: tuple[int, ...]
    rates: tuple[float, ...]
    repeat: int  # repeats of every level (with target_ci: the fewest)
    pool: int
    sweep: int  # rates in the sweep (0: no sweep)
    find_capacity: bool
    capacity_steps: int
    capacity_looks: int = 1
    target_ci: float | None = None  # percent: a level repeats until its headline half-widths are within it
    max_repeats: int = 1  # with target_ci: the cap on its repeats
    trace: bool = False  # a --trace level (under the first task, at most pool requests in flight)

    @classmethod
    def from_settings(cls, s: "RunnerSettings") -> "Plan":
        """The plan of resolved settings (:func:`llmload.runner.options.resolve`)."""
        return cls(tasks=tuple(s.tasks), modes=tuple(s.modes), concurrency=tuple(s.concurrency),
                   rates=tuple(round_rate(r) for r in s.rates or ()), repeat=s.repeat, pool=s.pool,
                   sweep=s.sweep or 0, find_capacity=s.find_capacity, capacity_steps=s.capacity_steps,
                   capacity_looks=s.capacity_looks, target_ci=s.target_ci,
                   max_repeats=s.max_repeats if s.target_ci is not None else s.repeat, trace=bool(s.trace))

    @property
    def searches(self) -> bool:
        """True when each (task, mode) first measures the saturation throughput."""
        return bool(self.sweep or self.find_capacity)

    @property
    def capacity_cells(self) -> int:
        """Most cells one capacity search runs (every step to its last look)."""
        return self.capacity_steps * self.capacity_looks if self.find_capacity else 0

    def pairs(self) -> list[tuple[str, str]]:
        return [(task, mode) for task in self.tasks for mode in self.modes]

    @property
    def needs_datasets(self) -> bool:
        """True when some level sends its tasks' prompt sets (a trace brings its own prompts)."""
        return bool(self.concurrency or self.rates or self.searches)

    def points(self, server: str, task: str, mode: str) -> list[Point]:
        """The levels known before anything runs: each concurrency, each rate, the trace (under the first task)."""
        trace = [Point(server, task, mode, Load(self.pool), TRACE_PHASE)] if self.trace and task == self.tasks[0] \
            else []
        return ([Point(server, task, mode, Load(c)) for c in self.concurrency]
                + [Point(server, task, mode, Load(self.pool, r)) for r in self.rates] + trace)

    def sweep_points(self, server: str, task: str, mode: str, saturation: float) -> list[Point]:
        return [Point(server, task, mode, Load(self.pool, r), "sweep") for r in sweep_rates(saturation, self.sweep)]

    def cell(self, point: Point, repeat: int = 0) -> Cell:
        """The ``repeat``-th cell of a level."""
        return Cell.at(point, cell_prefix(point, repeat, self.max_repeats), repeat=repeat)

    def saturation_cell(self, server: str, task: str, mode: str) -> Cell:
        """The closed loop at ``pool`` users whose request throughput is the saturation rate."""
        point = Point(server, task, mode, Load(self.pool), "sweep" if self.sweep else "capacity")
        return Cell.at(point, cell_prefix(point))

    def step_cell(self, server: str, task: str, mode: str, rate: float, look: int, requests: int) -> Cell:
        """One look at a capacity step: ``requests`` requests at ``rate``."""
        point = Point(server, task, mode, Load(self.pool, rate), "capacity")
        return Cell.at(point, cell_prefix(point, look), repeat=look, requests=requests)

    def search_cells(self) -> int:
        """Most cells the sweep and capacity search of one (task, mode) run."""
        if not self.searches:
            return 0
        return 1 + self.sweep * self.max_repeats + self.capacity_cells

    def cells_per_server(self) -> int:
        """Most cells one server runs (every level to its cap, every capacity step to its last look)."""
        per_pair = (len(self.concurrency) + len(self.rates)) * self.max_repeats + self.search_cells()
        return (per_pair * len(self.tasks) + self.trace * self.max_repeats) * len(self.modes)
