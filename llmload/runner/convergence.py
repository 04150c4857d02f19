"""``--target-ci PCT``: whether a level's repeats so far pin its headline figures down.

The headline figures are output tokens/s (every cell) and TTFT p50 (streaming
cells): the figures of the report's headline ratios. Their intervals are the
report's own, for the level's repeats pooled (:func:`reports.rows.run_rows` on
those cells' files), so the runner stops on the interval the report will
print. A level has converged when every headline interval's larger half-width
is at most PCT % of its value; it needs 2 repeats at least, since one run's
interval covers only what varies within that run.
"""

from __future__ import annotations

from pathlib import Path

from llmload.core.runfiles import Cell, RunFolderError, read_manifest
from reports.rows import run_rows
from reports.run import ReportError, RunData, load_cell

#: The headline figures of a cell, by mode.
HEADLINE = {"stream": ("output_token_throughput", "ttft_p50"), "sync": ("output_token_throughput",)}
#: The fewest repeats a level is judged on.
MIN_REPEATS = 2


def half_widths(run_dir: Path, cells: list[Cell]) -> dict[str, float | None]:
    """Each headline figure's larger half-width over its value, for ``cells`` (one level's repeats) pooled;
    None where the report gives that figure no interval."""
    columns = HEADLINE.get(cells[0].mode, HEADLINE["sync"])
    try:
        run = RunData(Path(run_dir), read_manifest(run_dir), [load_cell(Path(run_dir), c) for c in cells], [])
    except (ReportError, RunFolderError):  # a file the report cannot read: no interval, so no convergence
        return {column: None for column in columns}
    _, groups = run_rows(run)
    out: dict[str, float | None] = {}
    for column in columns:
        iv = groups[0].interval(column) if groups else None
        if iv is None or not iv.has_interval or not iv.value:
            out[column] = None
        else:
            out[column] = max(iv.high - iv.value, iv.value - iv.low) / abs(iv.value)
    return out


def converged(widths: dict[str, float | None], target_pct: float) -> bool:
    return bool(widths) and all(w is not None and w * 100.0 <= target_pct for w in widths.values())


def widths_text(widths: dict[str, float | None]) -> str:
    """``output tok/s +-4.2 %, TTFT p50 +-7.9 %``."""
    names = {"output_token_throughput": "output tok/s", "ttft_p50": "TTFT p50"}
    return ", ".join(f"{names.get(c, c)} " + ("no interval" if w is None else f"+-{w * 100:.1f} %")
                     for c, w in widths.items())
