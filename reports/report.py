"""The typed report of a run: everything its tables, plots and pages show, saved as ``report.json`` and loaded back.

:class:`Report` holds typed records only: the run's identity (:class:`RunInfo`:
its folder, run.json, its cells, its capacity searches as ``capacity.jsonl``
holds them, a fingerprint of its files), the rows (:class:`reports.rows.Row`: a
point, its status and its :class:`~reports.estimates.Estimates`, each figure's
value and :class:`~llmload.core.stats.Interval` with what it covers, its n and
how it was made), the ratios (:class:`reports.rows.Ratio`), and one record type
per section (:mod:`reports.sections`, :mod:`reports.cost`, :mod:`reports.steady`,
:mod:`reports.tokens`, :mod:`reports.failures`, :mod:`reports.timing`). :meth:`Report.save` writes it as
JSON (msgspec) with the format version of :mod:`llmload.core.formats`; :meth:`Report.load` reads it back
into the same types, numbers as the file holds them (an int stays an int), so
that every CSV, Markdown and PNG written from a loaded report is the one written
from the report as built. What a report does not keep: the requests behind its
estimates (a ratio's paired intervals need the raw logs: :func:`reports.run.load_run`).

A file of a newer format version, of an older one, or that is not a report is a
:class:`~reports.run.ReportError` (one line); :func:`saved_report` finds a run
folder's own ``report/report.json`` when it is current (same format, same files).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from llmload.core.calibration import Calibration, CalibrationError
from llmload.core.formats import FORMAT_VERSION, version_problem
from llmload.core.runfiles import Cell
from reports.cost import CapacityCostRow, CostRow
from reports.failures import FailureRow
from reports.records import NOT_SAVED
from reports.rows import Ratio, Row
from reports.run import ReportError, RunData, fingerprint
from reports.sections import CapacityRow, GoodputStep, OrderRow, RepeatRow, SeriesRow
from reports.steady import SteadyRow
from reports.timing import SplitRow
from reports.tokens import RequestTokens, ServerTokens

#: The typed report's file, beside the CSVs and the Markdown.
REPORT_JSON = "report.json"
#: What the file says it is (``format``), beside its ``format_version``.
FORMAT = "llmload-report"


@dataclass
class RunInfo:
    """The run a report was made of: its folder, ``run.json`` (the manifest), its cells (status and error as the
    report saw them: ``missing`` where an ok cell lost its raw log), its capacity searches as ``capacity.jsonl``
    holds them, and the fingerprint of its files (:func:`reports.run.fingerprint`)."""

    path: str
    manifest: dict[str, Any] = field(default_factory=dict)
    cells: list[Cell] = field(default_factory=list)
    capacity: list[dict[str, Any]] = field(default_factory=list)
    fingerprint: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return Path(self.path).name

    @classmethod
    def of(cls, run: RunData) -> "RunInfo":
        return cls(str(run.path.resolve()), run.manifest, [replace(d.cell, status=d.status, error=d.error) for d in run.cells],
                   run.capacity, run.fingerprint)


@dataclass
class Report:
    """Everything a report shows, computed once from a run (:func:`reports.merge.build_report`) or loaded."""

    run: RunInfo
    baseline: str | None
    rows: list[Row]  # one per cell (summary.csv)
    groups: list[Row]  # one per load point, repeats pooled (the Markdown tables, the plots)
    ratios: list[Ratio]  # baseline / server, point by point (top, bottom: rows of groups)
    peaks: list[str]
    tokens: list[ServerTokens] = field(default_factory=list)
    token_requests: list[RequestTokens] = field(default_factory=list)
    tokenizer_note: str = ""
    calibration: Calibration | None = None
    calibration_note: str = ""
    warnings: list[str] = field(default_factory=list)
    capacity: list[CapacityRow] = field(default_factory=list)
    capacity_ratios: list[Ratio] = field(default_factory=list)  # top, bottom: searches of run.capacity
    goodput_steps: list[GoodputStep] = field(default_factory=list)
    repeats: list[RepeatRow] = field(default_factory=list)
    turns: list[Row] = field(default_factory=list)
    series: list[SeriesRow] = field(default_factory=list)
    prefix: list[Ratio] = field(default_factory=list)  # cache off / on (top, bottom: rows of groups)
    order: list[OrderRow] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # the PNG files' names, beside the report
    steady: list[SteadyRow] = field(default_factory=list)
    cost: list[CostRow] = field(default_factory=list)
    capacity_cost: list[CapacityCostRow] = field(default_factory=list)
    failures: list[FailureRow] = field(default_factory=list)  # cells with failures or retries
    time_split: list[SplitRow] | None = None  # where the time goes (None: a report made before it was)
    data: RunData | None = field(default=None, metadata=NOT_SAVED)  # the run as read (None: loaded from a file)

    def to_builtins(self) -> dict:
        """The report as JSON's builtins, ``format`` and ``format_version`` first; a ratio names the rows (or
        searches) it compares by their index, a point's repeats the cell rows they are (``repeat_rows``)."""
        out = {"format": FORMAT, "format_version": FORMAT_VERSION}
        refs = {"groups": {id(r): i for i, r in enumerate(self.groups)},
                "capacity": {id(e): i for i, e in enumerate(self.run.capacity)}}
        for f in fields(self):
            if f.metadata.get("saved", True):
                out[f.name] = builtins(getattr(self, f.name))
        for name, where in RATIO_REFS.items():
            for ratio, saved in zip(getattr(self, name), out[name]):
                saved["top"], saved["bottom"] = refs[where].get(id(ratio.top)), refs[where].get(id(ratio.bottom))
        cells = {id(r.estimates): i for i, r in enumerate(self.rows)}
        for group, saved in zip(self.groups, out["groups"]):
            found = [cells.get(id(e)) for e in group.estimates.repeats]
            if None not in found:
                saved["estimates"]["repeats"], saved["repeat_rows"] = [], found
        return out

    def save(self, path: str | Path) -> Path:
        """Write the report as one JSON document."""
        return save_json(path, self.to_builtins())

    @classmethod
    def from_builtins(cls, data: dict, where: str = "report") -> "Report":
        """The report :meth:`to_builtins` gave; :class:`ReportError` (one line) for another format or version."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReportError(f"{where}: not an llmload report (its 'format' is not {FORMAT!r})")
        version = data.get("format_version")
        problem = (version_problem(version, where) if version is not None else f"{where}: no format version") or (
            None if version == FORMAT_VERSION else
            f"{where}: report format version {version} is older than this llmload's ({FORMAT_VERSION}): make it "
            "again from its run folder (llmload report RUN_DIR)")
        if problem:
            raise ReportError(problem)
        try:
            report = built(cls, data)
            for group, saved in zip(report.groups, data["groups"]):
                if "repeat_rows" in saved:
                    group.estimates.repeats = [report.rows[i].estimates for i in saved["repeat_rows"]]
            for name, where_to in RATIO_REFS.items():
                pool = report.groups if where_to == "groups" else report.run.capacity
                for ratio, saved in zip(getattr(report, name), data[name]):
                    ratio.top, ratio.bottom = (None if i is None else pool[i] for i in (saved["top"], saved["bottom"]))
        except CalibrationError as exc:
            raise ReportError(f"{where}: {exc}") from None
        except (TypeError, KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ReportError(f"{where}: not a valid report ({type(exc).__name__.lower()}: {exc})") from None
        return report

    @classmethod
    def load(cls, path: str | Path) -> "Report":
        """Read ``report.json``; :class:`ReportError` (one line) when it is missing, not a report, or of a format
        version this code does not read."""
        return cls.from_builtins(load_json(path), str(path))


def save_json(path: str | Path, data) -> Path:
    """Write a typed report's builtins (:meth:`Report.to_builtins`, a tune's) as one JSON document."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.encode(data) + b"\n")
    return path


def load_json(path: str | Path):
    """A report file's JSON; :class:`ReportError` (one line) when it is missing, unreadable or not JSON."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report file") from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot read the report: {exc.strerror or exc}") from None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ReportError(f"{path}: not a report: invalid JSON ({exc})") from None


#: The ratio sections and what their ``top`` and ``bottom`` are taken from.
RATIO_REFS = {"ratios": "groups", "prefix": "groups", "capacity_ratios": "capacity"}


def builtins(value):
    """``value`` as JSON's builtins: dataclasses field by field (less the fields marked :data:`NOT_SAVED`), a
    calibration as its file, numpy scalars as numbers; a non-finite float is an error (JSON has none)."""
    if isinstance(value, Calibration):
        return {**value.to_json(), "path": None if value.path is None else str(value.path)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: builtins(getattr(value, f.name)) for f in fields(value) if f.metadata.get("saved", True)}
    if isinstance(value, dict):
        return {str(k): builtins(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [builtins(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"a report holds no {value}: JSON has none")
    return value


def built(tp, data):
    """``data`` (JSON's builtins) as the type ``tp``: dataclasses field by field (their type hints), lists and
    dicts of them; every other value as the file holds it (no coercion: an int stays an int)."""
    if tp is Calibration:
        return None if data is None else Calibration.from_json(data, data.get("path"))
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"{tp.__name__}: an object expected, not {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        kwargs = {f.name: built(hints[f.name], data[f.name]) for f in fields(tp)
                  if f.init and f.metadata.get("saved", True) and f.name in data}
        return tp(**kwargs)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and data is not None:
        if not isinstance(data, list):
            raise TypeError(f"a list expected, not {type(data).__name__}")
        return [built(args[0], v) for v in data]
    if origin is dict and data is not None:
        if not isinstance(data, dict):
            raise TypeError(f"an object expected, not {type(data).__name__}")
        return {k: built(args[1], v) for k, v in data.items()}
    if origin in (typing.Union, types.UnionType) and data is not None:
        typed = [a for a in args if a is Calibration or dataclasses.is_dataclass(a) or typing.get_origin(a)]
        return built(typed[0], data) if typed else data
    return data


def current(report: Report, run_dir: Path) -> bool:
    """Whether ``report`` was made of ``run_dir`` as its files are now (same fingerprint)."""
    return bool(report.run.fingerprint) and report.run.fingerprint == fingerprint(run_dir, report.run.cells)


def saved_report(run_dir: str | Path) -> Report | None:
    """The run folder's own ``report/report.json`` when it is current (this format version, made of the folder's
    files as they are now), else None (none, stale, or of another version: the raw logs are there to rebuild it)."""
    path = Path(run_dir) / "report" / REPORT_JSON
    if not path.is_file():
        return None
    try:
        report = Report.load(path)
    except ReportError:
        return None
    return report if current(report, Path(run_dir)) else None
