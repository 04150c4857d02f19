"""How report values are written: shown units, digits, titles of resource columns."""

from __future__ import annotations

from llmload.core.metrics import FIGURE_BY_NAME, column_scale, column_title

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
