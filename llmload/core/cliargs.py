"""Every command line of the suite: its one error style, its argument types, and options declared on dataclasses.

* One error style: bad input ends a program with one line, ``error: <message>``,
  on stderr and exit code 2: :func:`print_error` writes it (``return print_error(...)``
  in a ``main``), :func:`fail` writes it and exits, :class:`OneLineParser` says
  its own errors so, :class:`CLIError` carries such a line up to where it is said.
* Types: ``type=positive_int`` and friends raise :class:`argparse.ArgumentTypeError`,
  which argparse turns into ``error: argument --x: <message>``.
* Options on dataclasses: a field declared with :func:`option` is also a
  command-line option and an environment variable; :func:`add_options` adds
  the fields to a parser (argparse, or Locust's configargparse one, which then
  reads ``PREFIX_NAME`` itself), :func:`read_env` reads the environment the
  same way, :func:`from_namespace` reads parsed flags back. The server, the load
  generator, the servers under test (the runner's and the benchmarks' server
  flags) and the runner declare their options so, each default once.
* Another program's option: :func:`borrow` declares a field with the flag, type
  and help of another class's field (its own default, a note on its help), so
  an option two programs share is declared once.
* Back to a command line: :func:`to_argv` renders settings as the flags their
  declarations parse (the runner's Locust command).
* Options from a file: :func:`read_options_file` reads a TOML or JSON table of
  ``option = value`` (keys: a parser's option names) with the types the flags
  have; :func:`parse_with_file` gives them to a parser as its defaults, so that
  the command line still wins (the runner's ``--scenario``).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn, Sequence


class CLIError(Exception):
    """Bad input, said as one ``error: <message>`` line with exit code 2 where it is caught (:func:`fail`)."""


def print_error(message: str, status: int = 2) -> int:
    """Say ``error: <message>`` on stderr, one line, and return ``status`` (2: bad input) for ``return`` in a
    ``main``; the one place a command line's error line is written."""
    sys.stdout.flush()
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return status


def fail(message: str, status: int = 2) -> NoReturn:
    """End the program with ``error: <message>`` on stderr (one line) and ``status`` (2: bad input)."""
    raise SystemExit(print_error(message, status))


def program(default: str) -> str:
    """The name a usage line shows: ``llmload NAME`` when run by the ``llmload`` command, else ``default``
    (``python -m llmload.runner``)."""
    invoked = sys.argv[0] if sys.argv else ""
    return invoked if invoked.startswith("llmload ") else default


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``error: ...`` line (no usage block), exit code 2, and whose usage
    line names the program as it was started (:func:`program`)."""

    def __init__(self, *args, prog: str | None = None, **kwargs):
        super().__init__(*args, prog=program(prog) if prog else None, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(message)


def number(kind: type, minimum: float, inclusive: bool = True, what: str | None = None) -> Callable[[str], float]:
    """A type for numbers of ``kind`` (int or float) of at least (``inclusive``) or above ``minimum``."""
    what = what or f"{'an integer' if kind is int else 'a number'} {'>=' if inclusive else '>'} {minimum:g}"

    def parse(text: str):
        try:
            value = kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value < minimum or (not inclusive and value == minimum):  # NaN fails too
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


positive_int = number(int, 1)
non_negative_int = number(int, 0)
positive_float = number(float, 0.0, inclusive=False)
non_negative_float = number(float, 0.0)

_SHARE = "a share of requests in [0, 1] (e.g. 0.3)"


def request_share(text: str) -> float:
    """A share of requests in [0, 1] (``--cancel-rate``, ``--max-error-rate``)."""
    value = number(float, 0.0, what=_SHARE)(text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not {_SHARE}")
    return value


def port(text: str) -> int:
    """A TCP port, 1 to 65535."""
    value = number(int, 1, what="a port (1 to 65535)")(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535)")
    return value


def comma_list(item: Callable[[str], object] = str, what: str = "values") -> Callable[[str], list]:
    """A type for ``a,b,c``: a non-empty comma-separated list, each item parsed by ``item``."""

    def parse(text: str) -> list:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
        values = []
        for part in parts:
            try:
                values.append(item(part))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{exc} (in {text!r})") from None
        return values

    return parse


def choice(allowed: Sequence[str] | Callable[[], Sequence[str]]) -> Callable[[str], str]:
    """A type for one name among ``allowed`` (or among those a function returns when the text is parsed: a
    registry that may grow after the option is declared)."""

    def parse(text: str) -> str:
        names = allowed() if callable(allowed) else allowed
        if text not in names:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(names)}")
        return text

    return parse


def choice_list(allowed: Sequence[str] | Callable[[], Sequence[str]], what: str = "names"
                ) -> Callable[[str], list[str]]:
    """A type for ``a,b``: a comma-separated list of names among ``allowed`` (see :func:`choice`)."""
    return comma_list(choice(allowed), what)


int_list = comma_list(positive_int, "positive integers")
float_list = comma_list(positive_float, "positive numbers")


_DURATION = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, unit: str = "s") -> float:
    """``90``, ``500ms``, ``0.5s``, ``2m``, ``1h`` as seconds (a bare number is in ``unit``); ValueError if not > 0."""
    match = _DURATION.match(text.strip().lower())
    if not match or float(match.group(1)) <= 0 or float(match.group(1)) == float("inf"):
        raise ValueError(f"{text!r} is not a duration > 0 (a number of {unit}, or with a unit: 500ms, 0.5s, 2m)")
    return float(match.group(1)) * _UNITS[match.group(2) or unit]


def duration(unit: str = "s") -> Callable[[str], float]:
    """A type for a duration in seconds; a bare number counts in ``unit``."""

    def parse(text: str) -> float:
        try:
            return parse_duration(text, unit)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def slo(text: str):
    """``--slo ttft=500,tpot=50,e2e=4000``: an :class:`~llmload.core.metrics.SLO` (ms, or 500ms / 0.5s)."""
    from llmload.core.metrics import SLO  # metrics imports numpy and ddsketch: only for commands with --slo

    try:
        return SLO.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. ttft=500,e2e=4000)") from None


def on_off(text: str) -> bool:
    """An on/off value (a switch in the environment): 1/true/yes/on or 0/false/no/off."""
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not an on/off value (1/0, true/false, yes/no, on/off)")


# --------------------------------------------------------------------------- options declared on dataclasses

def option(default: Any, help: str | Callable[[], str], *, flag: str | None = None, aliases: Sequence[str] = (),
           **argparse_kwargs: Any) -> Any:
    """A dataclass field that is also a command-line option (and, where the program reads one, an environment
    variable): its one default, its ``--help`` text, and ``add_argument``'s other keywords (``type``, ``choices``,
    ``metavar``, ``action``; Locust's ``include_in_web_ui`` and ``is_secret``).

    ``help`` may be a function, called when the option is added to a parser (a help that lists a registry).
    ``flag`` defaults to ``--field-name``; ``aliases`` are more names of the same option (``--parallel`` beside
    ``--concurrency``); a switch is ``action="store_true"``, one that turns a True default off is
    ``flag="--no-x", action="store_false"``. The help gains `` (default: ...)`` unless it names its default or
    the default is empty or a switch's (None, "", 0, a bool, a tuple).
    """
    metadata = {"flag": flag, "help": help, **argparse_kwargs}
    if aliases:
        metadata["aliases"] = tuple(aliases)
    return dataclasses.field(default=default, metadata=metadata)


_NO_DEFAULT = object()


def borrow(cls, name: str, *, default: Any = _NO_DEFAULT, note: str = "") -> Any:
    """A field declared as ``cls``'s option ``name`` is (its flag, type, choices, metavar and help: one
    declaration), for another program's settings: with its own ``default`` (else the same) and ``note``, text
    added to the help where the option means a little more there. Locust's web-UI keywords are left out."""
    f = next((f for f in option_fields(cls) if f.name == name), None)
    if f is None:
        raise ValueError(f"{cls.__name__} declares no option {name}")
    metadata = {k: v for k, v in f.metadata.items() if k not in LOCUST_KEYWORDS}
    metadata["flag"] = flag_of(f)
    base = f.metadata["help"]
    metadata["help"] = (lambda: help_text(base) + note) if callable(base) else base + note
    return dataclasses.field(default=f.default if default is _NO_DEFAULT else default, metadata=metadata)


def option_fields(cls) -> list[dataclasses.Field]:
    """The fields of dataclass ``cls`` declared with :func:`option`, in order."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def flag_of(f: dataclasses.Field) -> str:
    """The option string of an :func:`option` field (``--max-num-seqs`` for ``max_num_seqs``)."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def env_name(f: dataclasses.Field, prefix: str) -> str:
    """The environment variable of an :func:`option` field: ``prefix`` + its name in capitals."""
    return prefix + f.name.upper()


def _argparse_kwargs(f: dataclasses.Field) -> dict[str, Any]:
    return {k: v for k, v in f.metadata.items() if k not in ("flag", "help", "aliases")}


def help_text(help: str | Callable[[], str]) -> str:
    """An :func:`option`'s help text (a function's: called now)."""
    return help() if callable(help) else help


def _help(f: dataclasses.Field, default: Any) -> str:
    text = help_text(f.metadata["help"])
    if "default" in text or default in (None, "", False) or isinstance(default, (bool, tuple)):
        return text
    return text + " (default: %(default)s)"


#: ``add_argument`` keywords only Locust's parser takes (its web UI's form).
LOCUST_KEYWORDS = ("include_in_web_ui", "is_secret")


def add_options(parser, cls, *, defaults: Any = None, env_prefix: str | None = None,
                names: Sequence[str] | None = None) -> None:
    """Add one option per :func:`option` field of ``cls`` to ``parser`` (or an argument group), in order.

    ``defaults`` (an instance of ``cls`` or a mapping of some fields) replaces the fields' defaults; with
    ``env_prefix`` the parser itself reads each option's environment variable (configargparse's ``env_var``,
    as Locust's parser has, with its web-UI keywords). ``names``: only these fields, on a plain parser (another
    program declaring the same options, e.g. the runner passing them on to the load generator).
    """
    chosen = option_fields(cls)
    if names is not None:
        unknown = set(names) - {f.name for f in chosen}
        if unknown:
            raise ValueError(f"{cls.__name__} declares no option {', '.join(sorted(unknown))}")
        chosen = [f for f in chosen if f.name in names]
    for f in chosen:
        default = f.default
        if isinstance(defaults, Mapping):
            default = defaults.get(f.name, default)
        elif defaults is not None:
            default = getattr(defaults, f.name)
        extra = _argparse_kwargs(f)
        if env_prefix is not None:
            extra["env_var"] = env_name(f, env_prefix)
        if names is not None:
            extra = {k: v for k, v in extra.items() if k not in LOCUST_KEYWORDS}
        parser.add_argument(flag_of(f), *f.metadata.get("aliases", ()), dest=f.name, default=default,
                            help=_help(f, default), **extra)


def parse_value(f: dataclasses.Field, text: str) -> Any:
    """``text`` read as the option of ``f`` reads it (a switch: an on/off value); ArgumentTypeError if it cannot."""
    meta = f.metadata
    if meta.get("action") in ("store_true", "store_false"):
        return on_off(text)
    return _convert(text, meta.get("type"), meta.get("choices"))


def _convert(text: str, convert: Callable[[str], Any] | None, choices: Sequence[str] | None) -> Any:
    if choices and text not in choices:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(choices)}")
    try:
        return convert(text) if convert else text
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def read_env(cls, prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The :func:`option` fields of ``cls`` set in the environment (``prefix`` + NAME; unset or empty: left out),
    each parsed as its flag would be. Raises :class:`CLIError` naming the variable for a value that does not."""
    environ = os.environ if environ is None else environ
    values = {}
    for f in option_fields(cls):
        name = env_name(f, prefix)
        raw = environ.get(name)
        if raw in (None, ""):
            continue
        try:
            values[f.name] = parse_value(f, raw)
        except argparse.ArgumentTypeError as exc:
            raise CLIError(f"{name}={raw!r}: {exc}") from None
    return values


def from_namespace(cls, namespace: argparse.Namespace, **values: Any):
    """An instance of ``cls`` from parsed :func:`add_options` flags (a field not parsed keeps its default), with
    ``values`` on top."""
    parsed = {f.name: getattr(namespace, f.name) for f in option_fields(cls) if hasattr(namespace, f.name)}
    return cls(**{**parsed, **values})


# --------------------------------------------------------------------------- back to a command line

def argument_text(value: Any) -> str:
    """``value`` as a flag's argument: a number as its shortest exact text (``0.5``, ``2``), a list as
    ``a,b``, a value with an ``argument()`` method (an SLO) as that gives it, anything else as ``str``."""
    if hasattr(value, "argument"):
        return value.argument()
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(argument_text(v) for v in value)
    return str(value)


def to_argv(settings: Any, names: Sequence[str] | None = None) -> list[str]:
    """The flags that say ``settings`` (an instance of a class of :func:`option` fields) to its own parser:
    ``names`` in that order, or else every field away from its default, in declaration order. A value that says
    nothing (None, "", a switch left off) gives no flag."""
    by_name = {f.name: f for f in option_fields(type(settings))}
    if names is None:
        names = [n for n, f in by_name.items() if getattr(settings, n) != f.default]
    argv: list[str] = []
    for name in names:
        f = by_name[name]
        value = getattr(settings, name)
        action = f.metadata.get("action")
        if action in ("store_true", "store_false"):
            argv += [flag_of(f)] if value == (action == "store_true") else []
        elif value is not None and value != "":
            argv += [flag_of(f), argument_text(value)]
    return argv


# --------------------------------------------------------------------------- options from a file

def _file_value_text(value: Any) -> str:
    """A TOML or JSON value as the text its flag would be given: true/false, numbers, ``a,b`` for a list,
    ``k=v,k=v`` for a table; ValueError for what no flag takes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return argument_text(value)
    if isinstance(value, list) and all(isinstance(v, (bool, int, float, str)) for v in value):
        return ",".join(_file_value_text(v) for v in value)
    if isinstance(value, dict) and all(isinstance(v, (bool, int, float, str)) for v in value.values()):
        return ",".join(f"{k}={_file_value_text(v)}" for k, v in value.items())
    if value is None:
        raise ValueError("null is no value (leave the key out for the default)")
    raise ValueError(f"{json.dumps(value)} is not a value a flag takes (a string, number, true/false, a list of "
                     "them, or a table of them)")


def _file_actions(parser: argparse.ArgumentParser, exclude: Sequence[str]) -> dict[str, argparse.Action]:
    """The parser's options by the names a file may give them: each flag without its dashes (``max-tokens``),
    with underscores (``max_tokens``), and its destination."""
    names: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in exclude or isinstance(action, argparse._HelpAction):
            continue
        for flag in action.option_strings:
            if flag.startswith("--"):
                names[flag[2:].replace("-", "_")] = action
        names.setdefault(action.dest, action)
    return names


def _file_value(action: argparse.Action, key: str, value: Any) -> Any:
    """The value of ``action`` a file's ``key = value`` gives, parsed as its flag parses its argument."""
    if action.nargs == 0:  # a switch: true or false, as the flag given or not (no_cache = true: --no-cache)
        on = value if isinstance(value, bool) else on_off(_file_value_text(value))
        if key != action.dest:
            return action.const if on else action.default
        return on  # the value itself, by its destination's name (cache = false)
    try:
        text = _file_value_text(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    try:
        return _convert(text, action.type, action.choices)
    except TypeError:
        raise argparse.ArgumentTypeError(f"invalid value: {text!r}") from None


#: An options file's suffix: how it is read, what its syntax errors are, its format's name.
_FILE_FORMATS = {".toml": (tomllib.loads, tomllib.TOMLDecodeError, "TOML"),
                 ".json": (json.loads, json.JSONDecodeError, "JSON")}


def read_options_file(path: Path, parser: argparse.ArgumentParser, *, exclude: Sequence[str] = (),
                      what: str = "") -> dict[str, Any]:
    """The options a TOML (``.toml``) or JSON file gives, as ``{dest: value}``: a table of ``option = value``
    whose keys are ``parser``'s option names (``max_tokens`` or ``max-tokens``; an alias too), each value parsed
    as its flag parses its argument (a list may be a TOML list or ``"a,b"``). Options in ``exclude`` cannot be
    given so. Raises :class:`CLIError`, one line starting ``what`` (or the path), for an unreadable file, an
    unknown key or a bad value."""
    where = what or str(path)
    path = Path(path)
    loader = _FILE_FORMATS.get(path.suffix.lower())
    if loader is None:
        raise CLIError(f"{where}: give a .toml or a .json file")
    load, malformed, name = loader
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        table = load(text)
    except malformed as exc:
        raise CLIError(f"{where}: not valid {name}: {exc}") from None
    if not isinstance(table, dict):
        raise CLIError(f"{where}: expected a table of option = value, got {type(table).__name__}")
    actions = _file_actions(parser, exclude)
    values: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in table.items():
        name = str(key).lstrip("-").replace("-", "_")
        action = actions.get(name)
        if name in exclude:
            raise CLIError(f"{where}: {key} cannot be given in the file")
        if action is None:
            close = difflib.get_close_matches(name, list(actions), n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (its keys are the option names of --help)"
            raise CLIError(f"{where}: no option {key!r}{hint}")
        if action.dest in given:
            raise CLIError(f"{where}: {key} and {given[action.dest]} are the same option: give it once")
        given[action.dest] = str(key)
        try:
            values[action.dest] = _file_value(action, name, value)
        except argparse.ArgumentTypeError as exc:
            raise CLIError(f"{where}: {key}: {exc}") from None
    return values


def parse_with_file(parser: argparse.ArgumentParser, argv: Sequence[str] | None, dest: str,
                    exclude: Sequence[str] = ()) -> argparse.Namespace:
    """Parse ``argv``; when the option ``dest`` names a file, its options (:func:`read_options_file`; not those of
    ``exclude``) become the parser's defaults and ``argv`` is parsed again, so that a flag on the command line wins
    over the file. A bad file ends the program as a bad flag does (``parser.error``: one line, exit code 2)."""
    namespace = parser.parse_args(argv)
    path = getattr(namespace, dest, None)
    if path is None:
        return namespace
    flag = next((a.option_strings[0] for a in parser._actions if a.dest == dest), dest)
    try:
        values = read_options_file(path, parser, exclude=(dest, *exclude), what=f"{flag} {path}")
    except CLIError as exc:
        parser.error(str(exc))
    parser.set_defaults(**values)
    return parser.parse_args(argv)
