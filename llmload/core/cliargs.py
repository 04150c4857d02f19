"""Argument types for every command line of the suite: each rejects bad input with one clear argparse line.

``type=positive_int`` and friends raise :class:`argparse.ArgumentTypeError`,
which argparse turns into ``error: argument --x: <message>`` and exit code 2.
"""

from __future__ import annotations

import argparse
import re
from typing import Callable, Sequence


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``error: ...`` line (no usage block), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"error: {message}\n")


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


def choice(allowed: Sequence[str]) -> Callable[[str], str]:
    """A type for one name among ``allowed``."""

    def parse(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


def choice_list(allowed: Sequence[str], what: str = "names") -> Callable[[str], list[str]]:
    """A type for ``a,b``: a comma-separated list of names among ``allowed``."""
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
