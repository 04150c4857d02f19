"""What a run leaves behind: ``<prefix>_summary.json``, Locust's final CSVs, and the end-of-run line.

Everything here reads the live board (standalone, or the master's merged one),
so it costs the same at 1 k and 10 M results.
"""

from __future__ import annotations

import csv
import gc
import json
from pathlib import Path

import gevent

from llmload.core.atomicfile import atomic_write, atomic_write_text
from llmload.core.clienterror import describe
from llmload.core.cost import cost_figures, cost_text
from llmload.loadgen.live import LiveBoard, finite


def _finite_values(flat: dict) -> dict:
    return {k: finite(v) if isinstance(v, float) else v for k, v in flat.items()}


def summary_data(board: LiveBoard, settings, users: int | None, lag_warned: bool, raw_log: Path | None,
                 workers: list[dict] | None = None, run: str = "", stopped_early: str = "") -> dict:
    """The run's figures as ``<prefix>_summary.json`` holds them, so scripts need not parse the summary line;
    ``stopped_early``: why --max-error-rate stopped the run."""
    total = board.total()
    data = {"run": run or None, "summary": _finite_values(total.flat()),
            "per_task": {task: _finite_values(s.flat()) for task, s in board.summaries().items()},
            "line": total.line(), "exact": False, "unreachable_s": round(board.unreachable_so_far(), 3),
            "late_requests": board.counts.late, "lag_warning": lag_warned,
            "client_error": board.client_error(total),
            "cost": cost_figures(settings.price_per_hour, total),
            "settings": {"mode": settings.mode, "api": settings.api, "rate": settings.rate,
                         "arrival": settings.arrival_law if settings.open_loop else None,
                         "requests": settings.requests, "warmup": settings.warmup,
                         "slo": settings.slo.to_dict() if settings.slo else None, "users": users,
                         "cancel_rate": settings.cancel_rate or None, "cancel_after": settings.cancel_after or None,
                         "retry": settings.retry, "retry_max_wait": settings.retry_max_wait if settings.retry else None,
                         "max_error_rate": settings.max_error_rate},
            "stopped_early": stopped_early or None,
            "raw_log": str(raw_log) if raw_log is not None else None}
    if workers is not None:
        data["workers"] = workers
    return data


def write_json(path: Path, data: dict) -> Path:
    """Write ``data`` as indented JSON, replacing ``path`` in one step."""
    return atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def end_line(board: LiveBoard, raw_log: Path | None, price_per_hour: float | None = None) -> str:
    """The line the run ends with: the summary, its cost at ``price_per_hour``, how long the server was
    unreachable, where the raw log is."""
    total, down = board.total(), board.unreachable_so_far()
    return ("llmload: " + total.line() + describe(board.client_error(total))
            + cost_text(cost_figures(price_per_hour, total))
            + (f"; the server was unreachable for {down:.1f} s" if down >= 0.05 else "")
            + (f"; raw log {raw_log}" if raw_log else ""))


def write_final_csv(environment, prefix: str) -> None:
    """Rewrite Locust's ``*_stats.csv`` and ``*_failures.csv`` from the final statistics (one row per name)."""
    from locust.stats import PERCENTILES_TO_REPORT, StatsCSV  # Locust patches the process: only where it runs

    writer = StatsCSV(environment, PERCENTILES_TO_REPORT)
    for suffix, write in (("_stats.csv", writer.requests_csv), ("_failures.csv", writer.failures_csv)):
        with atomic_write(prefix + suffix, newline="") as handle:
            write(csv.writer(handle))


def stop_locust_csv_writer() -> None:
    """Stop Locust's periodic CSV writer greenlet (a workaround for Locust 2.47).

    Locust closes its CSV files at exit but leaves the writer greenlet running;
    gevent's exit hook yields once more, and when the writer's 1 s timer is due
    it writes to the closed files and prints a ValueError traceback. The final
    CSVs are written by :func:`write_final_csv` instead, so the writer is
    stopped here, at ``quit``, while its files are still open.
    """
    for obj in gc.get_objects():
        if isinstance(obj, gevent.Greenlet) and getattr(getattr(obj, "_run", None), "__name__", "") == "stats_writer":
            obj.kill(block=True, timeout=1)
