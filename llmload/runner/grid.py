"""A tune's configurations: each server of ``--servers`` crossed with settings of its own, or named in a file.

A *configuration* is one server kind started with its own flags on top of the
servers' shared settings (:class:`~llmload.targets.TargetSettings`), under a
name of its own, ``basic-batched[mns=16]``. Where they come from:

* ``--grid FLAG=V1,V2,...`` (repeated: every value of each crossed with every
  value of the others): ``python -m server``'s flags, for every basic server of
  ``--servers`` (the mock, naive and batched engines);
* ``--vllm-args-set 'ARGS'`` (repeated: one configuration each): vLLM's own
  flags, after ``--vllm-args``, for every vLLM server of ``--servers``;
* ``--grid-file FILE``: named configurations in TOML or JSON, as ``vllm bench
  sweep serve --serve-params`` reads them: a list of tables, or a table of named
  tables, each with its ``server`` (a kind) and its flags as keys
  (``max-num-seqs = 16``, ``enforce-eager = true``).

A server without any of these is one configuration as it is. Each kind applies
the flags itself (:meth:`~llmload.targets.TargetKind.tuned`), so a flag the
basic server does not take, or a value it cannot read, is one line before
anything starts; vLLM reads its own as it starts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from llmload.core.cliargs import CLIError, argument_text
from llmload.core.services import ServiceError
from llmload.targets import Target, TargetSettings, get_kind

#: A flag's name and its value (text), or True for a switch given bare (False: its ``--no-`` form).
Flag = tuple[str, "str | bool"]
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
#: Which option of ``llmload tune`` gives the configurations of a kind's flags (:attr:`TargetKind.tune_flags`).
SOURCES = {"server": "--grid", "vllm": "--vllm-args-set"}


@dataclass(frozen=True)
class Configuration:
    """One server of a tune with its own flags: its name, the server (of ``--servers``) and kind it is a setting
    of, its flags, the settings it starts with, and its runs' folder under ``runs/``."""

    name: str
    server: str
    kind: str
    flags: tuple[Flag, ...]
    settings: TargetSettings
    folder: str

    @property
    def target(self) -> Target:
        return Target(self.name, self.kind)

    def record(self) -> dict[str, Any]:
        """As ``tune.json`` holds it."""
        return {"name": self.name, "server": self.server, "kind": self.kind, "flags": [list(f) for f in self.flags],
                "args": flags_text(self.flags), "folder": self.folder}


def flags_text(flags: Sequence[Flag]) -> str:
    """``--max-num-seqs 16 --enforce-eager``: the flags as a command line writes them."""
    parts: list[str] = []
    for name, value in flags:
        parts += ([f"--{name}"] if value is True else [f"--no-{name}"] if value is False
                  else [f"--{name}", shlex.quote(str(value))])
    return " ".join(parts)


# --------------------------------------------------------------------------- the command line's types


def grid_axis(text: str) -> tuple[str, tuple[str, ...]]:
    """``--grid max-num-seqs=4,16,32``: a flag's name and the values to try."""
    name, sep, values = text.partition("=")
    name = name.strip().lstrip("-")
    items = tuple(v.strip() for v in values.split(","))
    if not sep or not _NAME.match(name) or not values.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not FLAG=V1,V2,... (e.g. max-num-seqs=4,16,32)")
    if any(not v for v in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty value (e.g. max-num-seqs=4,16,32)")
    if len(set(items)) != len(items):
        raise argparse.ArgumentTypeError(f"{text!r} repeats a value")
    return name, items


def flag_pairs(text: str) -> tuple[Flag, ...]:
    """``--vllm-args-set '--max-num-seqs 16 --enforce-eager'``: one configuration's flags, shell-quoted:
    ``--name value``, ``--name=value``, or a switch ``--name`` alone."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if not tokens:
        raise argparse.ArgumentTypeError("empty: give the configuration's flags, e.g. '--max-num-seqs 16'")
    pairs: list[Flag] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        name, eq, value = token[2:].partition("=")
        if not token.startswith("--") or not _NAME.match(name):
            raise argparse.ArgumentTypeError(f"{token!r} in {text!r} is not a flag (--name [value], e.g. "
                                             "--max-num-seqs 16)")
        if eq:
            pairs.append((name, value))
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            pairs.append((name, tokens[i + 1]))
            i += 2
        else:
            pairs.append((name, True))
            i += 1
    if len({n for n, _ in pairs}) != len(pairs):
        raise argparse.ArgumentTypeError(f"{text!r} gives a flag twice")
    return tuple(pairs)


# --------------------------------------------------------------------------- the grid file


def read_grid_file(path: Path) -> list[tuple[str | None, str, tuple[Flag, ...]]]:
    """(name or None, server kind, flags) of each configuration of a TOML or JSON grid file; :class:`CLIError`
    (one line naming the file and the configuration) for anything else."""
    where = f"--grid-file {path}"
    loaders = {".toml": (tomllib.loads, tomllib.TOMLDecodeError), ".json": (json.loads, json.JSONDecodeError)}
    if path.suffix.lower() not in loaders:
        raise CLIError(f"{where}: give a .toml or a .json file")
    load, malformed = loaders[path.suffix.lower()]
    try:
        data = load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    except malformed as exc:
        raise CLIError(f"{where}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if isinstance(data, dict) and list(data) == ["configs"] and isinstance(data["configs"], list):
        data = data["configs"]  # TOML's list of tables: [[configs]]
    if isinstance(data, dict):
        entries = [(str(name), table) for name, table in data.items()]
    elif isinstance(data, list):
        entries = [(None, table) for table in data]
    else:
        raise CLIError(f"{where}: expected a list of configurations or a table of named ones")
    if not entries:
        raise CLIError(f"{where}: no configurations in it")
    out = []
    for i, (name, table) in enumerate(entries, 1):
        what = f"{where}: configuration {name or i}"
        if not isinstance(table, dict):
            raise CLIError(f"{what}: expected a table of flag = value, got {type(table).__name__}")
        table = dict(table)
        name = name or table.pop("name", None) or table.pop("_benchmark_name", None)
        server = table.pop("server", None)
        if not isinstance(server, str) or not server:
            raise CLIError(f"{what}: give its server (server = \"basic-batched\")")
        flags: list[Flag] = []
        for key, value in table.items():
            key = str(key).lstrip("-")
            if not _NAME.match(key):
                raise CLIError(f"{what}: {key!r} is not a flag's name")
            if isinstance(value, bool):
                flags.append((key, value))
            elif isinstance(value, (int, float, str)) and str(value) != "":
                flags.append((key, argument_text(value)))
            else:
                raise CLIError(f"{what}: {key} = {json.dumps(value)} is not a flag's value (a string, a number or "
                               "true/false)")
        out.append((None if name is None else str(name), server, tuple(flags)))
    return out


# --------------------------------------------------------------------------- names


def abbreviations(names: Sequence[str]) -> dict[str, str]:
    """Short names of flags for configuration names: a flag of several words by its initials (``max-num-seqs``:
    ``mns``), unless two flags of the tune would share them; a flag of one word as it is."""
    def initials(name: str) -> str:
        words = [w for w in re.split(r"[-_.]", name) if w]
        return "".join(w[0] for w in words) if len(words) > 1 else name

    short = {name: initials(name) for name in dict.fromkeys(names)}
    taken = [s for s in short.values()]
    return {name: s if taken.count(s) == 1 else name for name, s in short.items()}


def label(flags: Sequence[Flag], short: dict[str, str]) -> str:
    """``mns=16,ee``: a configuration's flags in a name (a switch by its name; off: ``no-`` before it)."""
    parts = []
    for name, value in flags:
        key = short.get(name, name)
        parts.append(key if value is True else f"no-{key}" if value is False
                     else f"{key}={re.sub(r'[^A-Za-z0-9_.+:-]+', '_', str(value))}")
    return ",".join(parts)


def folder_of(name: str, taken: set[str]) -> str:
    """A configuration's runs' folder: its name with brackets and odd characters made plain, unique."""
    base = re.sub(r"[^A-Za-z0-9_.=,+-]+", "-", name).strip("-.") or "configuration"
    folder, n = base, 1
    while folder in taken:
        n += 1
        folder = f"{base}-{n}"
    taken.add(folder)
    return folder


# --------------------------------------------------------------------------- the configurations


def configurations(servers: Sequence[Target], base: TargetSettings, grid: Sequence[tuple[str, tuple[str, ...]]],
                   vllm_sets: Sequence[tuple[Flag, ...]],
                   named: Sequence[tuple[str | None, str, tuple[Flag, ...]]] = ()) -> list[Configuration]:
    """Every configuration of a tune, in order: each server's (its grid, its flag sets, or itself), then the grid
    file's. Raises :class:`CLIError` (one line) for a server that cannot be tuned, a grid no server takes, a flag
    a server does not take, two configurations of one name."""
    axes = [[(name, value) for value in values] for name, values in grid]
    given = {"server": [tuple(p) for p in itertools.product(*axes)] if axes else [],
             "vllm": [tuple(s) for s in vllm_sets]}
    planned: list[tuple[str, str, tuple[Flag, ...], str | None]] = []  # server, kind, flags, name given
    for target in servers:
        if target.url:
            raise CLIError(f"--servers {target.name}={target.url}: a tune starts and stops each configuration's "
                           "server itself: give a server kind")
        kind = get_kind(target.kind)
        for flags in given.get(kind.tune_flags or "", []) or [()]:
            planned.append((target.name, kind.name, flags, None))
    for source, option in SOURCES.items():
        takers = [t for t in servers if get_kind(t.kind).tune_flags == source]
        if given[source] and not takers:
            raise CLIError(f"{option}: no server of --servers takes these flags (they are for "
                           + ("the basic server's kinds: mock, basic-naive, basic-batched)" if source == "server"
                              else "vllm)"))
    for name, server, flags in named:
        try:
            kind = get_kind(server)
        except ServiceError as exc:
            raise CLIError(f"--grid-file: {exc}") from None
        planned.append((kind.name, kind.name, flags, name))
    if not planned:
        raise CLIError("no configuration to tune: give --servers (and --grid or --vllm-args-set), or --grid-file")
    short = abbreviations([flag for _, _, flags, _ in planned for flag, _ in flags])
    out: list[Configuration] = []
    folders: set[str] = set()
    for server, kind_name, flags, given_name in planned:
        kind = get_kind(kind_name)
        inner = given_name or label(flags, short)
        name = f"{server}[{inner}]" if inner else server
        if any(c.name == name for c in out):
            raise CLIError(f"two configurations are both {name}: give each its own flags or name")
        settings = kind.tuned(base, flags)
        out.append(Configuration(name, server, kind_name, tuple(flags), settings, folder_of(name, folders)))
    return out
