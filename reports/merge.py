"""Merge one run's files into a comparison report: summary tables (CSV, Markdown) and PNG plots.

Reads only files: the run's ``cells.jsonl`` (the matrix and each cell's status),
each cell's raw per-request log (``*_requests.jsonl``, the exact timings), its
monitor CSV (``*_monitor.csv``) and Locust's own stats CSV (``*_stats.csv``,
used as a cross-check of the request count). Every figure comes from
:mod:`llmload.core.metrics` (latency, throughput) and :mod:`monitors.sampler`
(memory peaks); nothing is computed here twice.

    python -m reports.merge results/20261202-130000
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results

SUMMARY_COLUMNS = [
    "server", "task", "mode", "concurrency", "status", "requests", "failures",
    "e2e_p50", "e2e_p90", "e2e_p99", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_mean", "tpot_p50",
    "tokens_per_s_mean", "request_throughput", "output_token_throughput", "total_output_tokens",
    "peak_gpu_used_mib", "peak_server_gpu_mib", "peak_server_rss_mib", "peak_host_used_mib", "mean_client_cpu_pct",
    "locust_requests", "error",
]
SECONDS = {"e2e_p50", "e2e_p90", "e2e_p99", "ttft_p50", "ttft_p90", "ttft_p99", "tpot_mean", "tpot_p50"}


class ReportError(RuntimeError):
    """A run folder that cannot be merged (one clear line)."""


def read_cells(run_dir: Path) -> list[dict]:
    """The run's matrix cells, last record per cell wins."""
    path = run_dir / "cells.jsonl"
    if not path.is_file():
        raise ReportError(f"{run_dir} has no cells.jsonl: is it a run folder made by `python -m llmload.runner`?")
    cells: dict[str, dict] = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                cell = json.loads(line)
                cells[cell["prefix"]] = cell
            except (json.JSONDecodeError, KeyError) as exc:
                raise ReportError(f"{path}:{lineno}: not a cell record ({exc})") from None
    return list(cells.values())


def locust_request_count(stats_csv: Path) -> int | None:
    """Request count of the Aggregated row of Locust's ``*_stats.csv`` (None if absent)."""
    if not stats_csv.is_file():
        return None
    with stats_csv.open(newline="") as handle:
        for row in csv.DictReader(handle):
            if row.get("Name") == "Aggregated":
                return int(float(row.get("Request Count") or 0))
    return None


def cell_row(run_dir: Path, cell: dict) -> dict:
    """One summary row: the cell's identity, its metrics from the raw log, its resource peaks."""
    row = {k: cell.get(k) for k in ("server", "task", "mode", "concurrency", "status", "error")}
    prefix = run_dir / cell["prefix"]
    raw = Path(f"{prefix}_requests.jsonl")
    if raw.is_file():
        row.update(summarize(read_results(raw)).flat())
    elif row["status"] == "ok":
        row["status"], row["error"] = "missing", "raw log missing"
    monitor = Path(f"{prefix}_monitor.csv")
    if monitor.is_file():
        from monitors.sampler import peak_usage, read_monitor

        row.update(peak_usage(read_monitor(monitor)))
    row["locust_requests"] = locust_request_count(Path(f"{prefix}_stats.csv"))
    return {col: row.get(col) for col in SUMMARY_COLUMNS}


def summary_rows(run_dir: Path) -> list[dict]:
    """Every cell of the run as a summary row, in matrix order."""
    return [cell_row(run_dir, cell) for cell in read_cells(run_dir)]


def throughput_ratios(rows: list[dict], numerator: str = "vllm") -> list[dict]:
    """Token and request throughput of ``numerator`` over each other server, cell by cell."""
    index = {(r["server"], r["task"], r["mode"], r["concurrency"]): r for r in rows if r["status"] == "ok"}
    ratios = []
    for (server, task, mode, conc), row in sorted(index.items(), key=lambda kv: tuple(map(str, kv[0]))):
        if server == numerator:
            continue
        top = index.get((numerator, task, mode, conc))
        if top is None:
            continue

        def ratio(key: str) -> float | None:
            return top[key] / row[key] if row.get(key) and top.get(key) is not None else None

        ratios.append({"baseline": server, "task": task, "mode": mode, "concurrency": conc,
                       "token_throughput_ratio": ratio("output_token_throughput"),
                       "request_throughput_ratio": ratio("request_throughput")})
    return ratios


def _fmt(key: str, value) -> str:
    if value is None or value == "":
        return "-"
    if key in SECONDS:
        return f"{value * 1000:.0f}"
    if isinstance(value, float):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def markdown_table(rows: list[dict], columns: list[str], headers: dict[str, str] | None = None) -> str:
    """A GitHub Markdown table of ``rows`` (latencies in ms)."""
    headers = headers or {}
    head = [headers.get(c, c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(c, row.get(c)) for c in columns) + " |")
    return "\n".join(lines)


MD_COLUMNS = ["server", "task", "mode", "concurrency", "status", "requests", "failures", "e2e_p50", "e2e_p99",
              "ttft_p50", "ttft_p99", "tpot_mean", "tokens_per_s_mean", "request_throughput",
              "output_token_throughput", "peak_server_rss_mib", "peak_server_gpu_mib"]
MD_HEADERS = {"concurrency": "users", "e2e_p50": "E2E p50 ms", "e2e_p99": "E2E p99 ms", "ttft_p50": "TTFT p50 ms",
              "ttft_p99": "TTFT p99 ms", "tpot_mean": "TPOT ms", "tokens_per_s_mean": "tok/s per req",
              "request_throughput": "req/s", "output_token_throughput": "out tok/s",
              "peak_server_rss_mib": "server RSS MiB", "peak_server_gpu_mib": "server GPU MiB"}


def write_report(run_dir: Path, out_dir: Path) -> Path:
    """Write ``summary.csv``, ``summary.md``, ``ratios.csv`` and the plots; return ``summary.md``."""
    rows = summary_rows(run_dir)
    ratios = throughput_ratios(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "summary.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with (out_dir / "ratios.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["baseline", "task", "mode", "concurrency",
                                                    "token_throughput_ratio", "request_throughput_ratio"])
        writer.writeheader()
        writer.writerows(ratios)
    from reports.plots import write_plots

    plots = write_plots(rows, ratios, out_dir)
    run_info = {}
    if (run_dir / "run.json").is_file():
        run_info = json.loads((run_dir / "run.json").read_text())
    parts = [f"# Load-test report: {run_dir.name}", ""]
    if run_info:
        m = run_info.get("machine", {})
        parts += [f"- command: `{run_info.get('command', '')}`",
                  f"- model: {run_info.get('served_model_name')} ({run_info.get('model')})",
                  f"- machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB, "
                  f"GPUs: {m.get('gpus') or 'none'}",
                  f"- versions: " + ", ".join(f"{k} {v}" for k, v in run_info.get("versions", {}).items() if v), ""]
    parts += ["Latencies in ms (from the raw per-request logs); throughput over each cell's wall time.", "",
              markdown_table(rows, MD_COLUMNS, MD_HEADERS), ""]
    if ratios:
        parts += ["## vLLM / baseline throughput", "",
                  markdown_table(ratios, ["baseline", "task", "mode", "concurrency", "token_throughput_ratio",
                                          "request_throughput_ratio"],
                                 {"concurrency": "users", "token_throughput_ratio": "token throughput ratio",
                                  "request_throughput_ratio": "request throughput ratio"}), ""]
    missing = [r for r in rows if r["status"] != "ok"]
    if missing:
        parts += ["## Missing or failed cells", ""]
        parts += [f"- {r['server']} {r['task']} {r['mode']} c={r['concurrency']}: {r['status']}: {r['error']}"
                  for r in missing]
        parts.append("")
    if plots:
        parts += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    summary = out_dir / "summary.md"
    summary.write_text("\n".join(parts))
    return summary


def merge_run(run_dir: str | Path, out_dir: str | Path | None = None) -> Path:
    """Merge ``run_dir`` into ``out_dir`` (default ``run_dir/report``); return the Markdown summary."""
    run_dir = Path(run_dir)
    return write_report(run_dir, Path(out_dir) if out_dir else run_dir / "report")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reports.merge",
                                description="Merge a run folder (from python -m llmload.runner) into summary "
                                            "tables (CSV, Markdown) and PNG plots.")
    p.add_argument("run_dir", type=Path, help="the run folder, e.g. results/20261202-130000")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: RUN_DIR/report)")
    args = p.parse_args(argv)
    try:
        summary = merge_run(args.run_dir, args.out)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
