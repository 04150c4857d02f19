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


def _colors(names) -> dict[str, str]:
    """One fixed colour per name (server or task), the same in every plot of a report."""
    return {name: f"C{i % 10}" for i, name in enumerate(sorted(set(names)))}


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


def _draw(ax, series, colors: dict[str, str], scale: float = 1.0) -> bool:
    """One line per ``(name, mode)`` series: colour by name, dashed for sync; log-2 concurrency axis."""
    for (name, mode), (xs, ys) in sorted(series.items()):
        ax.plot(xs, [y * scale for y in ys], MODE_STYLE.get(mode, "-"), color=colors.get(name), marker="o",
                label=f"{name} {mode}")
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
    server_colors = _colors(r["server"] for r in rows)
    for task in tasks:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        _draw(left, _series(rows, task, "e2e_p50"), server_colors, 1000)
        left.set_title(f"{task}: total latency (E2E p50)")
        left.set_ylabel("ms")
        has_ttft = _draw(right, _series(rows, task, "ttft_p50"), server_colors, 1000)
        right.set_title(f"{task}: time to first token (TTFT p50, stream)")
        right.set_ylabel("ms")
        if not has_ttft:
            right.text(0.5, 0.5, "no stream cells", ha="center", transform=right.transAxes)
        written.append(_save(fig, out_dir / f"latency_{task}.png"))
    if tasks:
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            _draw(ax, _series(rows, task, "output_token_throughput"), server_colors)
            ax.set_title(f"{task}: output token throughput")
            ax.set_ylabel("tokens/s")
        written.append(_save(fig, out_dir / "token_throughput.png"))
        gpu = any(r.get("peak_server_gpu_mib") for r in rows)
        key, label = ("peak_server_gpu_mib", "server GPU memory (peak, MiB)") if gpu else \
            ("peak_server_rss_mib", "server host RSS (peak, MiB; no GPU)")
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            _draw(ax, _series(rows, task, key), server_colors)
            ax.set_title(f"{task}: {label}", fontsize=9)
            ax.set_ylabel("MiB")
        written.append(_save(fig, out_dir / "memory.png"))
    if ratios:
        baselines = sorted({r["baseline"] for r in ratios})
        task_colors = _colors(r["task"] for r in ratios)
        fig, axes = plt.subplots(1, len(baselines), figsize=(5.5 * len(baselines), 4), squeeze=False)
        for ax, baseline in zip(axes[0], baselines):
            groups: dict[tuple[str, str], tuple[list, list]] = {}
            for r in sorted(ratios, key=lambda r: r["concurrency"]):
                if r["baseline"] == baseline and r["token_throughput_ratio"] is not None:
                    xs, ys = groups.setdefault((r["task"], r["mode"]), ([], []))
                    xs.append(r["concurrency"])
                    ys.append(r["token_throughput_ratio"])
            _draw(ax, groups, task_colors)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_ylabel(f"vLLM / {baseline}")
            ax.set_title(f"output token throughput: vLLM over {baseline}", fontsize=10)
        written.append(_save(fig, out_dir / "throughput_ratio.png"))
    return written
