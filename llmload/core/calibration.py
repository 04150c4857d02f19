"""The calibration: how much a kind of cell's figures vary from run to run on one machine, beyond a run's own interval.

A calibration file holds, per kind of cell (server, task, mode and load level, and
the same pooled over tasks and levels) and per figure, the relative standard
deviation between repeated runs that the within-run intervals do not explain,
with its degrees of freedom and the typical within-run standard error of those
runs, and the machine it was measured on (run.json's ``machine``). The reports widen a single run's intervals by it
(:func:`llmload.core.stats.widened`); ``python -m reports.calibrate`` measures it.
Method and validation: ``docs/statistics.md``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from llmload.core.paths import RESULTS_DIR

#: Where the reports look for a calibration when none is named (``LLMLOAD_CALIBRATION`` overrides; ``none``: none).
DEFAULT_PATH = RESULTS_DIR / "calibration.json"
ENV = "LLMLOAD_CALIBRATION"
#: What identifies a machine for a calibration (run.json's ``machine`` also has the OS and Python versions).
MACHINE_KEYS = ("cpu", "cores", "memory_gib", "gpus")
FORMAT = "llmload-calibration/1"


class CalibrationError(ValueError):
    """A calibration file that cannot be used (one line)."""


@dataclass(frozen=True)
class Spread:
    """Run-to-run relative standard deviation of one figure of one kind of cell beyond the within-run error
    (``sd``), its degrees of freedom, and the runs' typical within-run relative standard error (``within``)."""

    sd: float
    df: float
    within: float = 0.0
    cells: int = 1  # cells (with their repeats) it was measured on


def machine_id(machine: dict | None) -> dict:
    """The parts of a run.json ``machine`` that identify it (:data:`MACHINE_KEYS`)."""
    machine = machine if isinstance(machine, dict) else {}
    return {k: machine.get(k) for k in MACHINE_KEYS}


def describe_machine(machine: dict | None) -> str:
    m = machine_id(machine)
    gpus = m["gpus"]
    gpus = ", ".join(gpus) if isinstance(gpus, list) else (gpus or "none")
    return f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, GPUs: {gpus}"


#: kind of cell: (server, task, mode, level); task and level None for the pooled kind of a server and mode.
Kind = tuple


@dataclass
class Calibration:
    """Spreads per kind of cell and figure, and the machine they were measured on."""

    machine: dict
    spreads: dict[Kind, dict[str, Spread]] = field(default_factory=dict)
    created: str = ""
    sources: list[str] = field(default_factory=list)
    path: Path | None = None

    def for_cell(self, server: str, task: str, mode: str, level: str) -> dict[str, Spread]:
        """Each figure's spread for a cell: the cell's own kind, else the same task and mode at any level, else
        the server and mode pooled (``level``: the load's tag, :attr:`llmload.core.points.Load.tag`)."""
        found: dict[str, Spread] = {}
        for kind in ((server, task, mode, level), (server, task, mode, None), (server, None, mode, None)):
            for figure, spread in self.spreads.get(kind, {}).items():
                found.setdefault(figure, spread)
        return found

    def same_machine(self, machine: dict | None) -> bool:
        return machine_id(machine) == machine_id(self.machine) and machine_id(machine)["cpu"] is not None

    def to_json(self) -> dict:
        return {"format": FORMAT, "created": self.created, "machine": self.machine, "sources": self.sources,
                "spreads": [{"server": k[0], "task": k[1], "mode": k[2], "level": k[3], "figure": figure,
                             "sd": round(s.sd, 6), "df": round(s.df, 3), "within": round(s.within, 6),
                             "cells": s.cells}
                            for k, figures in self.spreads.items() for figure, s in figures.items()]}

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """Read a calibration file; :class:`CalibrationError` (one line) when it is missing or malformed."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise CalibrationError(f"{path}: no such calibration file (make one with python -m reports.calibrate)") \
                from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CalibrationError(f"{path}: cannot read the calibration: {getattr(exc, 'strerror', None) or exc}") \
                from None
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"{path}: not a calibration file: invalid JSON at line {exc.lineno}") from None
        return cls.from_json(data, path)

    @classmethod
    def from_json(cls, data, path: str | Path | None = None) -> "Calibration":
        """The calibration :meth:`to_json` gave (``path``: where it was read, named in errors);
        :class:`CalibrationError` (one line) when it is malformed."""
        where = path or "calibration"
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CalibrationError(f"{where}: not a calibration file: 'format' is not {FORMAT!r}")
        if not isinstance(data.get("machine"), dict) or not isinstance(data.get("spreads"), list):
            raise CalibrationError(f"{where}: not a calibration file: it needs a 'machine' object and a 'spreads' list")
        spreads: dict[Kind, dict[str, Spread]] = {}
        for i, entry in enumerate(data["spreads"]):
            problem = _entry_problem(entry)
            if problem:
                raise CalibrationError(f"{where}: spreads[{i}]: {problem}")
            kind = (entry["server"], entry.get("task"), entry["mode"], entry.get("level"))
            spreads.setdefault(kind, {})[entry["figure"]] = Spread(float(entry["sd"]), float(entry["df"]),
                                                                   float(entry["within"]),
                                                                   int(entry.get("cells") or 1))
        return cls(machine=data["machine"], spreads=spreads, created=str(data.get("created") or ""),
                   sources=[str(s) for s in data.get("sources") or []], path=Path(path) if path else None)


def _entry_problem(entry) -> str | None:
    if not isinstance(entry, dict):
        return "not an object"
    for key in ("server", "mode", "figure"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            return f"'{key}' must be a name"
    for key in ("task", "level"):
        if entry.get(key) is not None and not isinstance(entry[key], str):
            return f"'{key}' must be a name or null"
    for key, low in (("sd", 0.0), ("within", 0.0), ("df", 1e-9)):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < low:
            return f"'{key}' must be a positive number" if key == "df" else f"'{key}' must be a number >= 0"
    return None


def default_path() -> tuple[Path | None, bool]:
    """The calibration file to use when none is named, and whether it was named: ``LLMLOAD_CALIBRATION``
    (``none``: no calibration, None), else :data:`DEFAULT_PATH` (not named: used only if it exists)."""
    named = os.environ.get(ENV)
    if named:
        return (None, True) if named.lower() == "none" else (Path(named), True)
    return DEFAULT_PATH, False
