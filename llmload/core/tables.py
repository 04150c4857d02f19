"""Tables as text: every table the suite prints or writes goes through :func:`render` (tabulate)."""

from __future__ import annotations

from typing import Iterable, Sequence

from tabulate import tabulate

MISSING = "-"


def render(rows: Iterable[Sequence], headers: Sequence[str], fmt: str = "github") -> str:
    """``rows`` under ``headers``: ``github`` Markdown (also readable as text) or ``simple`` for terminals.

    ``None`` cells print as ``-``; numbers are printed as given (format them first).
    """
    return tabulate([[MISSING if v is None else v for v in row] for row in rows], headers=list(headers),
                    tablefmt=fmt, disable_numparse=True, missingval=MISSING)
