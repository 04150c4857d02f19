"""Argument types for every command line of the suite: each rejects bad input with one clear argparse line.

``type=positive_int`` and friends raise :class:`argparse.ArgumentTypeError`,
which argparse turns into ``error: argument --x: <message>`` and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


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
