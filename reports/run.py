"""A run folder read once for the reports: its manifest, cells, raw results, monitor samples and capacity.

Everything the reports compute starts from :func:`load_run`; the files are read
through :mod:`llmload.core.runfiles`, :mod:`llmload.core.metrics` and
:mod:`monitors.sampler` only.
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from llmload.core.cliargs import print_error
from llmload.core.metrics import RequestResult, RunSummary, summarize
from llmload.core.points import Point
from llmload.core.rawlog import read_results
from llmload.core.runfiles import (CAPACITY, CELLS, DEFAULT_BASELINE, MANIFEST, Cell, RunFolderError, read_capacity,
                                   read_cells, read_manifest)
from llmload.core.spans import SpanJoin, join_file
from monitors.sampler import peak_usage, read_monitor


class ReportError(RuntimeError):
    """A run folder or an option that cannot be reported on (one clear line)."""


@dataclass
class CellData:
    """One cell of a run with what its files hold."""

    cell: Cell
    results: list[RequestResult] = field(default_factory=list)  # as logged, warm-up included
    summary: RunSummary | None = None
    peaks: dict = field(default_factory=dict)
    monitor: object = None  # the monitor CSV as a DataFrame, None when absent
    locust_requests: int | None = None
    client_error: dict | None = None  # the client-error block of the load generator's _summary.json
    spans: SpanJoin | None = None  # the cell's spans joined to its results (None: no spans file)
    status: str = ""  # the cell's status, "missing" when an ok cell lost its raw log
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def measured(self) -> list[RequestResult]:
        """The results every statistic counts (warm-up excluded)."""
        return [r for r in self.results if not r.warmup]


@dataclass
class RunData:
    """A whole run: its folder, ``run.json``, cells in matrix order and capacity searches."""

    path: Path
    manifest: dict
    cells: list[CellData]
    capacity: list[dict]
    fingerprint: dict = field(default_factory=dict)  # what its files held when read (:func:`fingerprint`)

    @property
    def servers(self) -> list[str]:
        """Server names in the order of the matrix."""
        names: list[str] = []
        for c in self.cells:
            if c.cell.server not in names:
                names.append(c.cell.server)
        for entry in self.capacity:
            if entry.get("server") and entry["server"] not in names:
                names.append(entry["server"])
        return names

    @property
    def prefix_caching(self) -> dict[str, bool]:
        """Server name -> whether its prefix cache was on, for the servers run.json says have one to switch."""
        return {entry["name"]: entry["prefix_caching"] for entry in self.manifest.get("servers") or []
                if isinstance(entry, dict) and isinstance(entry.get("prefix_caching"), bool)}

    def groups(self) -> dict[Point, list[CellData]]:
        """Cells by load point (repeats together), in matrix order."""
        found: dict[Point, list[CellData]] = {}
        for c in self.cells:
            found.setdefault(c.cell.point, []).append(c)
        return found


def locust_request_count(stats_csv: Path) -> int | None:
    """Request count of the Aggregated row of Locust's ``*_stats.csv`` (None if absent)."""
    if not stats_csv.is_file():
        return None
    with stats_csv.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("Name") == "Aggregated":
                return int(float(row.get("Request Count") or 0))
    return None


def load_cell(run_dir: Path, cell: Cell) -> CellData:
    data = CellData(cell=cell, status=cell.status, error=cell.error)
    files = cell.files(run_dir)
    if files.raw_log.is_file():
        try:
            data.results = read_results(files.raw_log)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        try:
            data.spans = join_file(data.results, files.spans)  # sets each joined result's server_spans
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        data.summary = summarize(data.results)  # after the join: a span gives a part of the latency (its frontend)
    elif cell.status == "ok":
        data.status, data.error = "missing", "raw log missing"
    if files.monitor.is_file():
        try:
            data.monitor = read_monitor(files.monitor)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        data.peaks = peak_usage(data.monitor)
    data.locust_requests = locust_request_count(files.locust_stats)
    data.client_error = stated_client_error(files.summary)
    return data


def stated_client_error(summary: Path) -> dict | None:
    """The ``client_error`` block of a cell's ``_summary.json`` (None: no file, an older one, or unreadable)."""
    try:
        block = json.loads(summary.read_text(encoding="utf-8")).get("client_error")
    except (OSError, ValueError, AttributeError):
        return None
    return block if isinstance(block, dict) and block.get("bound_ms") is not None else None


def fingerprint(path: Path, cells: list[Cell]) -> dict:
    """What a report of the run folder rests on: a hash of run.json, cells.jsonl and capacity.jsonl, and each
    cell's raw log size (a saved report whose fingerprint differs from its folder's is stale)."""
    files = {}
    for name in (MANIFEST, CELLS, CAPACITY):
        try:
            files[name] = hashlib.sha256((path / name).read_bytes()).hexdigest()
        except OSError:
            files[name] = None
    logs = {}
    for cell in cells:
        try:
            logs[cell.prefix] = cell.files(path).raw_log.stat().st_size
        except OSError:
            logs[cell.prefix] = None
    return {"files": files, "raw_logs": logs}


def load_run(run_dir: str | Path) -> RunData:
    """Read a run folder; :class:`ReportError` (one line) when it is not one."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ReportError(f"{path} is not a folder")
    try:
        cells = read_cells(path)
        manifest = read_manifest(path)
        capacity = read_capacity(path)
    except RunFolderError as exc:
        raise ReportError(str(exc)) from None
    return RunData(path=path, manifest=manifest, cells=[load_cell(path, c) for c in cells], capacity=capacity,
                   fingerprint=fingerprint(path, cells))


def resolve_baseline(run: RunData, requested: str | None) -> str | None:
    """The baseline server: ``requested``, else run.json's ``baseline``, else ``vllm`` when the run has one.

    A requested name the run does not hold is a :class:`ReportError` listing the servers;
    without a usable baseline (a run without vLLM) there are no ratios (None).
    """
    servers = run.servers
    if requested is not None:
        if requested not in servers:
            raise ReportError(f"--baseline {requested}: the run has no server of that name "
                              f"(servers: {', '.join(servers) or 'none'})")
        return requested
    named = run.manifest.get("baseline")
    if named in servers:
        return named
    return DEFAULT_BASELINE if DEFAULT_BASELINE in servers else None


def report_command(action: Callable[[], Path]) -> int:
    """Run a report command's work: print the path it wrote (exit 0), or one ``error:`` line (exit 2)."""
    try:
        path = action()
    except ReportError as exc:
        return print_error(str(exc))
    except OSError as exc:  # an output folder that cannot be written
        return print_error(f"{exc.filename or ''}: {exc.strerror or exc}")
    print(path)
    return 0
