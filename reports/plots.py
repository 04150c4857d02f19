"""PNG plots of a merged run: latency, throughput and memory per task and load, ratios to the baseline.

Input is the report's typed rows (:mod:`reports.rows`: each figure with its interval
where it has one; the sections' records for capacity steps and server series);
this module only draws them and never reads a run's files.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from llmload.core.points import Point  # noqa: E402
from reports.format import title  # noqa: E402
from reports.rows import Ratio, Row  # noqa: E402
from reports.sections import CapacityRow, GoodputStep, SeriesRow  # noqa: E402
from reports.timing import COLOURS, NAMES, SplitRow, parts_of  # noqa: E402

MODE_STYLE = {"stream": "-", "sync": "--"}


def colors(names) -> dict[str, str]:
    """One fixed colour per name (server or task), the same in every plot of a report."""
    return {name: f"C{i % 10}" for i, name in enumerate(sorted(set(names)))}


def value(row, column: str):
    """The row's value for ``column``, or None (also for an empty CSV-style cell)."""
    v = row.get(column)
    return None if v in (None, "") else v


def interval_of(row, column: str):
    """The interval drawn for ``column`` of a row (a ratio's own), None for a row without intervals."""
    if isinstance(row, Ratio):
        return row.interval
    return row.interval(column) if isinstance(row, Row) else None


def series(rows: list, task: str | None, column: str, x: str = "concurrency", name: str = "server",
           by: str | None = None, line=None):
    """``{(name, mode): [(x, y, low, high, enough), ...]}`` over ok rows holding ``column``, in order of ``by``
    (default ``x``); ``line(row)`` gives another key of the row's line than ``(name, mode)``.

    ``enough``: the value passes the minimum-sample rule (False: drawn hollow, without an interval).
    """
    out: dict[tuple[str, str], list] = {}
    for row in rows:
        if row.get("status", "ok") != "ok" or (task and row.get("task") != task):
            continue
        y, xv = value(row, column), value(row, x)
        if y is None or xv is None:
            continue
        low, high = ("ci_low", "ci_high") if column == "value" else (f"{column}_ci_low", f"{column}_ci_high")
        iv = interval_of(row, column)
        enough = iv is None or iv.value is not None
        key = line(row) if line else (row.get(name), row.get("mode", ""))
        out.setdefault(key, []).append((xv, y, value(row, low), value(row, high), enough, value(row, by or x)))
    return {k: [p[:5] for p in sorted(v, key=lambda p: p[5])] for k, v in out.items()}


def draw(ax, lines, palette: dict[str, str], scale: float = 1.0, log2_x: bool = True,
         xlabel: str = "concurrent users") -> bool:
    """One line per ``(name, mode)``: colour by name, dashed for sync, error bars where intervals exist,
    hollow markers for values of too few samples."""
    for (name, mode), points in sorted(lines.items()):
        xs = [p[0] for p in points]
        ys = [p[1] * scale for p in points]
        color = palette.get(name)
        ax.plot(xs, ys, MODE_STYLE.get(mode, "-"), color=color, label=f"{name} {mode}".strip())
        solid = [p for p in points if p[4]]
        hollow = [p for p in points if not p[4]]
        if solid:
            ax.plot([p[0] for p in solid], [p[1] * scale for p in solid], "o", color=color)
        if hollow:
            ax.plot([p[0] for p in hollow], [p[1] * scale for p in hollow], "o", color=color, mfc="white")
        bars = [(p[0], p[1] * scale, p[2] * scale, p[3] * scale) for p in points
                if p[2] is not None and p[3] is not None]
        if bars:
            ax.errorbar([b[0] for b in bars], [b[1] for b in bars],
                        yerr=[[max(b[1] - b[2], 0) for b in bars], [max(b[3] - b[1], 0) for b in bars]],
                        fmt="none", ecolor=color, alpha=0.6, capsize=3)
    if any(not p[4] for points in lines.values() for p in points):
        ax.text(0.01, 0.01, "hollow: too few requests for this percentile (not an estimate)", fontsize=6,
                color="grey", transform=ax.transAxes)
    if lines:
        if log2_x:
            levels = sorted({p[0] for pts in lines.values() for p in pts})
            ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [f"{x:g}" for x in levels])
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return bool(lines)


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def matrix_rows(rows: list) -> list:
    """Closed-loop matrix rows (the ones drawn against concurrency)."""
    return [r for r in rows if value(r, "rate") is None and r.get("phase", "matrix") in ("matrix", None)]


def write_plots(rows: list[Row], ratios: list[Ratio], out_dir: Path, baseline: str | None,
                goodput_steps: list[GoodputStep] = (), turns: list[Row] = (), server_series: list[SeriesRow] = (),
                capacity: list[CapacityRow] = (), time_split: list[SplitRow] = ()) -> list[Path]:
    """Draw every plot the merged rows allow into ``out_dir``; return the files written."""
    written: list[Path] = []
    matrix = matrix_rows(rows)
    tasks = sorted({r.point.task for r in matrix if r.ok})
    palette = colors(r.point.server for r in rows)
    for task in tasks:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        draw(left, series(matrix, task, "e2e_p50"), palette, 1000)
        left.set_title(f"{task}: total latency (E2E p50)")
        left.set_ylabel("ms")
        if not draw(right, series(matrix, task, "ttft_p50"), palette, 1000):
            right.text(0.5, 0.5, "no stream cells", ha="center", transform=right.transAxes)
        right.set_title(f"{task}: time to first token (TTFT p50, stream)")
        right.set_ylabel("ms")
        written.append(save(fig, out_dir / f"latency_{task}.png"))
    if tasks:
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            draw(ax, series(matrix, task, "output_token_throughput"), palette)
            ax.set_title(f"{task}: output token throughput")
            ax.set_ylabel("tokens/s")
        written.append(save(fig, out_dir / "token_throughput.png"))
        gpu = any(value(r, "peak_server_gpu_mib") for r in matrix)
        key, label = ("peak_server_gpu_mib", "server GPU memory (peak, MiB)") if gpu else \
            ("peak_server_rss_mib", "server host RSS (peak, MiB; no GPU)")
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.8), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            draw(ax, series(matrix, task, key), palette)
            ax.set_title(f"{task}: {label}", fontsize=9)
            ax.set_ylabel("MiB")
        written.append(save(fig, out_dir / "memory.png"))
    token_ratios = [r for r in matrix_rows(ratios) if r.metric == "output_token_throughput"
                    and r.value is not None]
    if token_ratios and baseline:
        servers = sorted({r.get("server") for r in token_ratios})
        task_palette = colors(r.get("task") for r in token_ratios)
        fig, axes = plt.subplots(1, len(servers), figsize=(5.5 * len(servers), 4), squeeze=False)
        for ax, server in zip(axes[0], servers):
            draw(ax, series([r for r in token_ratios if r.get("server") == server], None, "value", name="task"),
                 task_palette)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_ylabel(f"{baseline} / {server}")
            ax.set_title(f"output token throughput: {baseline} / {server}", fontsize=10)
        written.append(save(fig, out_dir / "throughput_ratio.png"))
    written += knee_plots(rows, palette, out_dir)
    written += goodput_plots(rows, list(goodput_steps), palette, out_dir, list(capacity))
    written += turn_plots(list(turns), palette, out_dir)
    written += server_plots(list(server_series), out_dir)
    written += time_split_plots(list(time_split), out_dir)
    return written


def time_split_plots(rows: list[SplitRow], out_dir: Path) -> list[Path]:
    """``time_split.png``: per task and mode, a stacked bar of each part's mean per server and load level
    (positive parts up from 0, a negative residual below it, as measured) with the client's mean latency."""
    panels = list(dict.fromkeys((r.point.task, r.point.mode) for r in rows if r.timed))
    if not panels:
        return []
    bars = max(sum(1 for r in rows if r.timed and (r.point.task, r.point.mode) == p) for p in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.5, 0.9 * bars + 4.0) * len(panels), 4.4),
                             squeeze=False)
    for ax, (task, mode) in zip(axes[0], panels):
        mine = [r for r in rows if r.timed and (r.point.task, r.point.mode) == (task, mode)]
        up, down = [0.0] * len(mine), [0.0] * len(mine)
        for name in parts_of(mode):
            found = [r.part(name) for r in mine]
            if all(p is None or p.mean is None for p in found):
                continue
            heights = [0.0 if p is None or p.mean is None else p.mean * 1000.0 for p in found]
            bottoms = [d + h if h < 0 else u for u, d, h in zip(up, down, heights)]
            ax.bar(range(len(mine)), heights, bottom=bottoms, color=COLOURS[name], label=NAMES[name], width=0.6)
            up = [u + max(h, 0.0) for u, h in zip(up, heights)]
            down = [d + min(h, 0.0) for d, h in zip(down, heights)]
        shown = [(i, r.total * 1000.0) for i, r in enumerate(mine) if r.total is not None]
        ax.plot([i for i, _ in shown], [t for _, t in shown], "k_", markersize=20, markeredgewidth=2,
                label=f"client {'TTFT' if mode == 'stream' else 'E2E'} mean")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(mine)), [f"{r.point.server}\n{r.point.level}" for r in mine], fontsize=8)
        ax.set_ylabel("ms (mean per request)")
        ax.set_title(f"{task} {mode}: where the time goes", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return [save(fig, out_dir / "time_split.png")]


KNEE = (("ttft_p50", "TTFT p50"), ("ttft_p99", "TTFT p99"), ("e2e_p50", "E2E p50"), ("e2e_p99", "E2E p99"))


def knee_plots(rows: list[Row], palette: dict[str, str], out_dir: Path) -> list[Path]:
    """Latency against achieved request throughput, one curve per server, from the open-loop cells."""
    open_loop = [r for r in rows if not r.point.load.closed and r.ok]
    written = []
    for task in sorted({r.point.task for r in open_loop}):
        fig, axes = plt.subplots(1, len(KNEE), figsize=(4.2 * len(KNEE), 3.8), squeeze=False)
        for ax, (column, label) in zip(axes[0], KNEE):
            if draw(ax, series(open_loop, task, column, x="request_throughput", by="rate"), palette, 1000,
                    log2_x=False, xlabel="achieved requests/s (in order of offered rate)"):
                ax.set_yscale("log")
            else:
                ax.text(0.5, 0.5, "not measured", ha="center", transform=ax.transAxes)
            ax.set_title(f"{task}: {label} vs throughput", fontsize=9)
            ax.set_ylabel("ms")
        written.append(save(fig, out_dir / f"knee_{task}.png"))
    return written


DECISION_MARKERS = {"held": "o", "failed": "x", "undecided": "s"}


def goodput_plots(rows: list[Row], steps: list[GoodputStep], palette: dict[str, str], out_dir: Path,
                  capacity: list[CapacityRow] = ()) -> list[Path]:
    """Goodput against offered rate (capacity steps and open-loop cells), with the ideal y = x; each capacity
    step marked by its decision, each capacity as a line with its interval shaded."""
    points: list = [s for s in steps if s.goodput is not None and s.rate is not None]
    seen = {(p.server, p.task, p.mode, p.rate) for p in points}
    points += [r for r in rows if r.ok and not r.point.load.closed and value(r, "goodput") is not None
               and (r.point.server, r.point.task, r.point.mode, r.point.load.rate) not in seen]
    written = []
    for task in sorted({p.get("task") for p in points}):
        fig, ax = plt.subplots(figsize=(5.5, 4))
        lines = series(points, task, "goodput", x="rate")
        draw(ax, lines, palette, log2_x=False, xlabel="offered requests/s")
        for decision, marker in DECISION_MARKERS.items():
            mine = [p for p in points if p.get("task") == task and p.get("decision") == decision]
            for p in mine:
                ax.plot(p.rate, p.goodput, marker, mfc="none", mec=palette.get(p.server), ms=8, ls="")
            if mine:
                ax.plot([], [], marker, mfc="none", mec="grey", ls="", label=f"step {decision}")
        for c in capacity:
            if c.task != task or c.capacity_rps is None:
                continue
            color = palette.get(c.server)
            ax.axvline(c.capacity_rps, color=color, lw=1, ls="--")
            if c.ci_low is not None:
                ax.axvspan(c.ci_low, c.ci_high if c.ci_high is not None else c.capacity_rps,
                           color=color, alpha=0.12, lw=0)
        top = max(p[0] for pts in lines.values() for p in pts)
        ax.plot([0, top], [0, top], ":", color="grey", lw=0.8, label="every request within the SLO")
        ax.legend(fontsize=7)
        ax.set_ylabel("goodput (requests/s within the SLO)")
        ax.set_title(f"{task}: goodput vs offered rate (capacity: dashed, its interval shaded)", fontsize=9)
        written.append(save(fig, out_dir / f"goodput_{task}.png"))
    return written


def turn_plots(turns: list[Row], palette: dict[str, str], out_dir: Path) -> list[Path]:
    """TTFT p50 by turn index of multi-turn conversations, one line per server, mode and load level."""
    written = []

    def line(t: Row) -> tuple[str, str]:
        return t.point.server, f"{t.point.mode} {t.point.load.label}"

    for task in sorted({t.point.task for t in turns}):
        fig, ax = plt.subplots(figsize=(5.5, 4))
        if not draw(ax, series(turns, task, "ttft_p50", x="turn", line=line), palette, 1000, log2_x=False,
                    xlabel="turn"):
            draw(ax, series(turns, task, "e2e_p50", x="turn", line=line), palette, 1000, log2_x=False,
                 xlabel="turn")
        ax.set_ylabel("ms")
        ax.set_title(f"{task}: TTFT p50 by turn", fontsize=10)
        written.append(save(fig, out_dir / f"turns_{task}.png"))
    return written


SERIES_STYLE = {"server_running": ("running", "C0", "left"), "server_waiting": ("waiting", "C1", "left"),
                "server_kv_cache_pct": ("KV cache %", "C2", "right"),
                "server_prefix_cache_hit_pct": ("prefix-cache hit %", "C3", "right")}


def server_plots(series_rows: list[SeriesRow], out_dir: Path) -> list[Path]:
    """Per server and task: for each cell, the server's own running/waiting/KV/prefix-cache series over time
    beside the client's output tokens/s."""
    written = []
    for server, task in sorted({(s.point.server, s.point.task) for s in series_rows}):
        cells = [s for s in series_rows if s.point.server == server and s.point.task == task]
        fig, axes = plt.subplots(len(cells), 2, figsize=(11, 2.4 * len(cells) + 0.6), squeeze=False)
        repeated = any(c.repeat for c in cells)
        for (left, right), s in zip(axes, cells):
            level = s.point.load.label
            if repeated:
                level += f" #{(s.repeat or 0) + 1}"
            if s.point.phase not in (None, "matrix"):
                level += f" ({s.point.phase})"
            percent = [c for c in s.series if SERIES_STYLE[c][2] == "right"]
            twin = left.twinx() if percent else None
            for column, values in s.series.items():
                label, color, side = SERIES_STYLE[column]
                (left if side == "left" else twin).plot(s.t, values, color=color, label=label)
            if s.cancel_t:
                left.plot(s.cancel_t, [0] * len(s.cancel_t), "|", color="C3", markersize=9,
                          label="client cancels")
            handles = left.get_legend_handles_labels()[0]
            if twin is not None:
                twin.set_ylim(0, 105)
                twin.set_ylabel("%", fontsize=8)
                handles += twin.get_legend_handles_labels()[0]
            left.set_ylabel("requests", fontsize=8)
            left.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper right")
            left.set_title(f"{server} {task} {s.point.mode} {level}: server", fontsize=9)
            right.plot(s.client_t, s.client_tok_s, color="C4", drawstyle="steps-mid")
            right.sharex(left)
            right.set_title("client: output tokens/s", fontsize=9)
            for ax in (left, right):
                ax.set_xlabel("s", fontsize=8)
                ax.grid(True, alpha=0.3)
        written.append(save(fig, out_dir / f"server_{server}_{task}.png"))
    return written


def compare_plot(rows: list[Ratio], path: Path) -> Path | None:
    """B/A of each compared figure with its interval: one panel per figure, one line per cell (red: significant)."""
    metrics = [m for m in dict.fromkeys(r.metric for r in rows) if any(
        r.metric == m and value(r, "ratio") is not None for r in rows)]
    if not metrics:
        return None
    cols = min(3, len(metrics))
    nrows = -(-len(metrics) // cols)
    cells = sorted({_cell_label(r) for r in rows})
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 0.9 + 0.32 * len(cells) * nrows), squeeze=False)
    for ax, metric in zip(axes.ravel(), metrics):
        mine = [r for r in rows if r.metric == metric and value(r, "ratio") is not None]
        for r in mine:
            y = cells.index(_cell_label(r))
            color = "C3" if r.get("significant") else "C0"
            low, high, at = value(r, "ci_low"), value(r, "ci_high"), r.get("ratio")
            if low is not None and high is not None:
                ax.errorbar([at], [y], xerr=[[max(at - low, 0)], [max(high - at, 0)]], fmt="o", color=color,
                            capsize=3)  # a ratio of means can fall outside the interval of its log ratio
            else:
                ax.plot([at], [y], "o", color=color, mfc="none")
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yticks(range(len(cells)), cells, fontsize=7)
        ax.set_title(f"B / A: {title(metric)}", fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in axes.ravel()[len(metrics):]:
        ax.axis("off")
    return save(fig, path)


def _cell_label(row: Ratio) -> str:
    """``mock qa stream c4`` of a compared point; ``mock qa stream`` of a capacity."""
    level = "" if row.get("concurrency") is None else Point.of(row.record).load.label
    return " ".join(x for x in (row.get("server"), row.get("task"), row.get("mode"), level) if x)
