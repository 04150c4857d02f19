"""How report values are written: shown units, digits, titles of resource columns, estimates with intervals.

A section's content is a list of parts, each a paragraph (a string, Markdown's
backticks for code) or a :class:`Table`: :mod:`reports.merge` writes them as
Markdown, :mod:`reports.html` as HTML, from the same cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.core.metrics import FIGURE_BY_NAME, column_scale, column_title
from llmload.core.stats import Interval, min_samples, quantile_of
from llmload.core.tables import render
from reports.estimates import estimated


@dataclass
class Table:
    """One table of a section: its headers and its rows of shown cells (None: empty)."""

    headers: list[str]
    body: list[list]

    def markdown(self) -> str:
        return render(self.body, self.headers)


#: A part of a section: a paragraph or a table.
Part = str | Table


def markdown_section(title: str, parts: list[Part]) -> list[str]:
    """``## title``, then each part and a blank line (the Markdown report's lines)."""
    out = [f"## {title}", ""]
    for part in parts:
        out += [part if isinstance(part, str) else part.markdown(), ""]
    return out

#: Titles of identity columns in the Markdown tables.
IDENTITY_TITLES = {"concurrency": "users", "level": "level", "repeats": "repeats"}


def number(value: float) -> str:
    """About three significant figures: ``1234``, ``52.3``, ``1.23``, ``0.0412``."""
    if value == 0:
        return "0"
    rounded = abs(float(f"{value:.3g}"))
    if rounded >= 100:
        return f"{value:.0f}"
    if rounded >= 10:
        return f"{value:.1f}"
    if rounded >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def shown(column: str, value) -> str | None:
    """A stored value as the tables show it (latencies in ms); None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or isinstance(value, str):
        return str(value)
    if isinstance(value, int) and column_scale(column) == 1.0:
        return str(value)
    return number(float(value) * column_scale(column))


def title(column: str) -> str:
    """The Markdown header of a column: the catalogue's title, or a readable resource/identity name."""
    if column in IDENTITY_TITLES:
        return IDENTITY_TITLES[column]
    text = column_title(column)
    if text != column or column in FIGURE_BY_NAME:
        return text
    words = column.split("_")
    unit = {"mib": "MiB", "pct": "%", "ms": "ms", "rps": "req/s"}.get(words[-1])
    if unit:
        words = words[:-1] + [unit]
    return " ".join(words)


def too_few(stat: str, n: int) -> str:
    return f"n={n}<{min_samples(stat)}"


def covers_note(iv: Interval, covers: str | None) -> str:
    """`` (within-run only)`` where an interval covers other levels than its row's (``covers``), else nothing."""
    return f" ({iv.covers})" if covers and iv.has_interval and iv.covers and iv.covers != covers else ""


def row_covers(ivs) -> str | None:
    """What most of a row's intervals cover (the row's ``intervals`` column)."""
    labels = [iv.covers for iv in ivs if iv is not None and iv.has_interval and iv.covers]
    return max(labels, key=labels.count) if labels else None


def figure_text(column: str, value, iv: Interval | None, covers: str | None = None) -> str | None:
    """``value [low, high]`` in shown units; ``n=8<300`` for a percentile of too few values; the interval's
    levels where they differ from the row's ``covers``."""
    if iv is None:
        return shown(column, value)
    stat = "rate" if column in ("request_throughput", "output_token_throughput", "goodput") else \
        column.rpartition("_")[2]
    if iv.value is None and iv.n and stat.startswith("p") and quantile_of(stat) is not None:
        return too_few(stat, iv.n)
    text = shown(column, value if iv.value is None else iv.value)
    if text is None:
        return None
    if iv.has_interval:
        return f"{text} [{shown(column, iv.low)}, {shown(column, iv.high)}]" + covers_note(iv, covers)
    return f"{text} (n={iv.n})" if estimated(column) and iv.n < (min_samples(stat) or 0) else text


def estimate_text(column: str, row, covers: str | None = None) -> str | None:
    """:func:`figure_text` of a row's (:class:`reports.rows.Row`) figure."""
    return figure_text(column, row.get(column), row.interval(column), covers)


def ratio_text(iv: Interval | None, covers: str | None = None) -> str | None:
    """``1.98 [1.90, 2.05] *`` (``*``: significant: the interval excludes 1 and covers run-to-run variation)."""
    if iv is None:
        return None
    if iv.value is None:
        return f"n={iv.n} pairs, too few"
    text = number(iv.value)
    if iv.has_interval:
        text += f" [{number(iv.low)}, {number(iv.high)}]" + (" *" if iv.significant else "") + covers_note(iv, covers)
    return text
