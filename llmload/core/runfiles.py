"""The run folder: the files a run of the runner leaves, written by the runner and read by the reports.

    results/<run>/
        run.json                     settings, servers, model, SLO, versions, machine, the order the cells ran in,
                                     the files' ``format_version`` (:mod:`llmload.core.formats`;
                                     :func:`write_manifest`, rewritten whole as the run goes)
        cells.jsonl                  one :class:`Cell` per line, appended as cells start and end (last wins)
        capacity.jsonl               one line per capacity search (server, task, capacity and its interval, steps)
        <server>/<cell>_requests.jsonl   the raw per-request log (:mod:`llmload.core.metrics`)
        <server>/<cell>_monitor.csv      resources (``monitors``)
        <server>/<cell>_spans.jsonl      the OpenTelemetry spans received during the cell (``--otel-receiver``,
                                     :mod:`llmload.core.spans`); spans.jsonl at the top: those received between cells
        <server>/<cell>_stats.csv ...    Locust's own CSVs; ``_summary.json`` the load generator's summary
        report/                      what ``python -m reports.merge`` writes (``report.json``: the typed report)

A tune (``llmload tune``) is a folder of such runs:

    results/<tune>/
        tune.json                    its settings, configurations, the order of its runs and each run's state
                                     (:func:`write_tune`, rewritten whole as the tune goes; ``format`` "llmload-tune")
        runs/<configuration>/b<block>/   one run folder per configuration and block
        report/                      the tune's report (``report.json``, ``tune.md``, ``tune.html``)

Nothing here imports above the core; the reports read a run through these functions only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from llmload.core.atomicfile import atomic_write_text
from llmload.core.formats import FORMAT_VERSION, version_problem
from llmload.core.points import Load, Point
from llmload.core.records import known_fields

MANIFEST = "run.json"
CELLS = "cells.jsonl"
CAPACITY = "capacity.jsonl"
#: The spans the runner's receiver got outside every cell (a server's start-up, late ones).
SPANS = "spans.jsonl"
#: The server every ratio is taken against when neither the command nor run.json names one (when the run has it).
DEFAULT_BASELINE = "vllm"
#: What became of a cell.
STATUSES = ("pending", "running", "ok", "failed", "skipped", "interrupted")
#: A tune's state file, what it says it is, and the folder of its runs.
TUNE_MANIFEST = "tune.json"
TUNE_FORMAT = "llmload-tune"
TUNE_RUNS = "runs"
#: What became of one run of a tune (a configuration in a block): ``done`` (measured, whatever the search found),
#: ``failed`` (its server did not start, or the run stopped with an error), ``interrupted``.
TUNE_STATES = ("pending", "running", "done", "failed", "interrupted")


#: The status of a cell its load generator stopped early because more requests failed than --max-error-rate allows
#: (its figures are kept; it is not ``ok``).
ERROR_RATE = "error-rate"


class RunFolderError(RuntimeError):
    """A folder that is not a readable run (one clear line)."""


@dataclass
class Cell:
    """One point of the matrix (a server, task, mode and load level, one repeat) and what became of it."""

    server: str
    task: str
    mode: str
    concurrency: int  # users (closed loop) or the pool of requests in flight (open loop)
    prefix: str  # file prefix, relative to the run folder
    rate: float | None = None  # offered requests/s (open loop); None = closed loop
    repeat: int = 0  # the repeat, or a capacity step's look (0 = the first)
    phase: str = "matrix"  # "matrix", "sweep", "capacity", "trace" (which part of the run made it)
    requests: int | None = None  # requests it sends when not the run's --requests (a capacity step's later looks)
    status: str = "pending"  # then running, ok, failed, error-rate (ERROR_RATE), interrupted or skipped
    error: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    order: int | None = None  # its place in the order the run ran its cells (1 = first)
    block: int | None = None  # the block of the interleaved order it ran in (None: sequential order)
    started: float | None = None  # epoch seconds it started

    @property
    def point(self) -> Point:
        """The load point it measures (its repeats share it)."""
        return Point(self.server, self.task, self.mode, Load(self.concurrency, self.rate), self.phase)

    @property
    def key(self) -> tuple:
        """What identifies a cell across runs: server, task, mode, level and repeat."""
        return (self.server, self.task, self.mode, self.concurrency, self.rate, self.repeat)

    @classmethod
    def at(cls, point: Point, prefix: str, **rest) -> "Cell":
        """A cell of ``point`` whose files start with ``prefix``."""
        return cls(point.server, point.task, point.mode, point.load.concurrency, prefix, rate=point.load.rate,
                   phase=point.phase, **rest)

    def files(self, run_dir: Path) -> "CellFiles":
        return CellFiles(Path(run_dir) / self.prefix)

    @classmethod
    def from_dict(cls, data: dict) -> "Cell":
        return cls(**known_fields(cls, data))


@dataclass(frozen=True)
class CellFiles:
    """The files of one cell, by their common prefix."""

    prefix: Path

    def _with(self, suffix: str) -> Path:
        return Path(f"{self.prefix}{suffix}")

    @property
    def raw_log(self) -> Path:
        return self._with("_requests.jsonl")

    @property
    def monitor(self) -> Path:
        return self._with("_monitor.csv")

    @property
    def spans(self) -> Path:
        return self._with("_spans.jsonl")

    @property
    def locust_stats(self) -> Path:
        return self._with("_stats.csv")

    @property
    def summary(self) -> Path:
        return self._with("_summary.json")

    @property
    def locust_log(self) -> Path:
        return self._with("_locust.log")


def append_cell(run_dir: Path, cell: Cell) -> None:
    """Record ``cell``'s current state (one JSON line, flushed: a killed run keeps what it recorded)."""
    with (Path(run_dir) / CELLS).open("a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(cell)) + "\n")


def read_cells(run_dir: Path) -> list[Cell]:
    """The run's cells in matrix order, the last record of each cell winning."""
    path = Path(run_dir) / CELLS
    if not path.is_file():
        raise RunFolderError(f"{run_dir} has no {CELLS}: is it a run folder made by `python -m llmload.runner`?")
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    cells: dict[str, Cell] = {}
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            cell = Cell.from_dict(json.loads(line))
        except (json.JSONDecodeError, TypeError) as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                break  # the last line, cut short by a kill
            raise RunFolderError(f"{path}:{lineno}: not a cell record ({exc})") from None
        cells[cell.prefix] = cell
    return list(cells.values())


def write_manifest(run_dir: Path, info: dict) -> Path:
    """Write ``run.json`` whole, its ``format_version`` first (through a temporary file: a kill leaves the previous
    version, never half)."""
    info = {"format_version": FORMAT_VERSION, **{k: v for k, v in info.items() if k != "format_version"}}
    return atomic_write_text(Path(run_dir) / MANIFEST, json.dumps(info, indent=2, default=str) + "\n")


def read_manifest(run_dir: Path) -> dict:
    """``run.json`` ({} when absent); :class:`RunFolderError` for one of a newer format."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunFolderError(f"{path}: not JSON ({exc})") from None
    problem = version_problem(info.get("format_version"), str(path)) if isinstance(info, dict) else None
    if problem:
        raise RunFolderError(problem)
    return info


def append_capacity(run_dir: Path, entry: dict) -> None:
    with (Path(run_dir) / CAPACITY).open("a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def read_capacity(run_dir: Path) -> list[dict]:
    """The run's capacity searches (empty when it made none), the last per (server, task) winning."""
    path = Path(run_dir) / CAPACITY
    if not path.is_file():
        return []
    found: dict[tuple, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            found[(entry.get("server"), entry.get("task"), entry.get("mode"))] = entry
    return list(found.values())


def write_tune(tune_dir: Path, info: dict) -> Path:
    """Write ``tune.json`` whole (through a temporary file), its ``format`` and ``format_version`` first."""
    info = {"format": TUNE_FORMAT, "format_version": FORMAT_VERSION,
            **{k: v for k, v in info.items() if k not in ("format", "format_version")}}
    return atomic_write_text(Path(tune_dir) / TUNE_MANIFEST, json.dumps(info, indent=2, default=str) + "\n")


def read_tune(tune_dir: Path) -> dict:
    """``tune.json`` of a tune folder; :class:`RunFolderError` (one line) when there is none, it is not a tune's,
    or it is of a newer format."""
    path = Path(tune_dir) / TUNE_MANIFEST
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFolderError(f"{tune_dir} has no {TUNE_MANIFEST}: is it a folder made by `llmload tune`?") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: cannot read it ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != TUNE_FORMAT:
        raise RunFolderError(f"{path}: not a tune's state file (its 'format' is not {TUNE_FORMAT!r})")
    problem = version_problem(info.get("format_version"), str(path))
    if problem:
        raise RunFolderError(problem)
    return info
