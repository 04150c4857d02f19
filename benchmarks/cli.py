"""Argument types shared by the benchmark scripts: each rejects bad input with one clear argparse line."""

from __future__ import annotations

import argparse
from typing import Callable


def int_list(value: str) -> list[int]:
    """``1,8,32``: a comma-separated list of positive integers."""
    try:
        items = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None
    if not items or min(items) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {value!r}")
    return items


def choice_list(allowed: tuple[str, ...], what: str) -> Callable[[str], list[str]]:
    """A type for ``a,b``: a comma-separated list of names among ``allowed``."""
    def parse(value: str) -> list[str]:
        items = [v.strip() for v in value.split(",") if v.strip()]
        if not items or any(v not in allowed for v in items):
            raise argparse.ArgumentTypeError(f"{what} must be a comma list of {', '.join(allowed)}, got {value!r}")
        return items
    return parse


def positive_int(value: str) -> int:
    """An integer of at least 1."""
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return number


def non_negative_float(value: str) -> float:
    """A number of at least 0."""
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number
