"""PNG plots of a merged run, in the spirit of the seed: basic vs vLLM per task and concurrency.

Input is the list of summary rows from :mod:`reports.merge` (already computed
figures); this module only draws them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MODE_STYLE = {"stream": "-", "sync": "--"}


def _series(rows: list[dict], task: str | None, key: str):
    """``{(server, mode): ([concurrency...], [value...])}`` for rows with a value for ``key``."""
    series: dict[tuple[str, str], tuple[list, list]] = {}
    for row in sorted(rows, key=lambda r: r["concurrency"]):
        if row["status"] != "ok" or row.get(key) is None or (task and row["task"] != task):
            continue
        xs, ys = series.setdefault((row["server"], row["mode"]), ([], []))
        xs.append(row["concurrency"])
        ys.append(row[key])
    return series


def _draw(ax, series, scale: float = 1.0) -> bool:
    for (server, mode), (xs, ys) in sorted(series.items()):
        ax.plot(xs, [y * scale for y in ys], MODE_STYLE.get(mode, "-"), marker="o", label=f"{server} {mode}")
    if series:
        levels = sorted({x for xs, _ in series.values() for x in xs})
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(x) for x in levels])
        ax.set_xlabel("concurrent users")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return bool(series)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(rows: list[dict], ratios: list[dict], out_dir: Path) -> list[Path]:
    """Draw every plot the rows allow into ``out_dir``; return the files written."""
    written: list[Path] = []
    tasks = sorted({r["task"] for r in rows if r["status"] == "ok"})
    for task in tasks:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        _draw(left, _series(rows, task, "e2e_p50"), 1000)
        left.set_title(f"{task}: total latency (E2E p50)")
        left.set_ylabel("ms")
        has_p2ft = _draw(right, _series(rows, task, "p2ft_p50"), 1000)
        right.set_title(f"{task}: time to first token (P2FT p50, stream)")
        right.set_ylabel("ms")
        if not has_p2ft:
            right.text(0.5, 0.5, "no stream cells", ha="center", transform=right.transAxes)
        written.append(_save(fig, out_dir / f"latency_{task}.png"))
    if tasks:
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            _draw(ax, _series(rows, task, "output_token_throughput"))
            ax.set_title(f"{task}: output token throughput")
            ax.set_ylabel("tokens/s")
        written.append(_save(fig, out_dir / "token_throughput.png"))
        gpu = any(r.get("peak_server_gpu_mib") for r in rows)
        key, label = ("peak_server_gpu_mib", "server GPU memory (peak, MiB)") if gpu else \
            ("peak_server_rss_mib", "server host RSS (peak, MiB; no GPU)")
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            _draw(ax, _series(rows, task, key))
            ax.set_title(f"{task}: {label}", fontsize=9)
            ax.set_ylabel("MiB")
        written.append(_save(fig, out_dir / "memory.png"))
    if ratios:
        fig, ax = plt.subplots(figsize=(6, 4))
        groups: dict[tuple[str, str, str], tuple[list, list]] = {}
        for r in sorted(ratios, key=lambda r: r["concurrency"]):
            if r["token_throughput_ratio"] is None:
                continue
            xs, ys = groups.setdefault((r["baseline"], r["task"], r["mode"]), ([], []))
            xs.append(r["concurrency"])
            ys.append(r["token_throughput_ratio"])
        for (baseline, task, mode), (xs, ys) in sorted(groups.items()):
            ax.plot(xs, ys, MODE_STYLE.get(mode, "-"), marker="o", label=f"{task} {mode} (vs {baseline})")
        ax.axhline(1.0, color="grey", lw=0.8)
        levels = sorted({x for xs, _ in groups.values() for x in xs})
        if levels:
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [str(x) for x in levels])
        ax.set_xlabel("concurrent users")
        ax.set_ylabel("vLLM / baseline")
        ax.set_title("output token throughput ratio")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, out_dir / "throughput_ratio.png"))
    return written
