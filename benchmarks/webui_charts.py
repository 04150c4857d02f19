"""The web UI's LLM charts, two ways in one run: the hand-written SVG script against an ECharts one.

The shipped charts are the SVG script (``llmload/loadgen/static/llmcharts.js``); the ECharts way (Apache
ECharts 6.1.0's ``echarts.common.min.js`` and the same script with its chart class drawn by ECharts) is
the commit that tried it, read from git. docs/webui.md has the figures and why the SVG stayed.

Headless Chromium (Debian's ``chromium``, driven by Playwright as the browser test does) opens a page
with the charts' script(s) and synthetic history: 8 charts, every line present, N points (N s of a run).
For each way and each N it measures, as medians over ``--loads`` fresh pages:

- **bytes** the page loads for the charts (the scripts; gzip-compressed in brackets);
- **load**: milliseconds from the start of navigation until the 8 charts are drawn (parse, first render,
  the next frame), and the first render alone;
- **heap**: the page's JavaScript heap after a garbage collection, in MB;
- **poll**: one poll's work (ingest one new point, draw every chart again): the script's time, and the
  renderer's main-thread time (Chromium's ``TaskDuration``: script, layout, paint), in ms per poll.

Each way's files come from a git revision (``--svg REV``, ``--echarts REV``; ``.`` is the working tree).

    python -m benchmarks.webui_charts
    python -m benchmarks.webui_charts --points 60 3600 --loads 3 --polls 20
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llmload.core.cliargs import OneLineParser, fail, positive_int, print_error
from llmload.core.paths import REPO_ROOT
from llmload.core.tables import render

#: Where each way's files are: a git revision, or "." for the working tree (the shipped SVG script).
SVG_REVISION = "."
#: The commit that drew the charts with ECharts (vendored in static/), measured and not kept.
ECHARTS_REVISION = "295cdfb7aa7947c8f36d905c4bb3d1a592d59a51"
STATIC = "llmload/loadgen/static"
CHART_LIBRARY = "echarts.common.min.js"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--enable-precise-memory-info"]
T0 = 1_796_000_000  # an epoch second (2026-12)

PAGE = """<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="llmcharts.css"></head>
<body><div id="host" style="width:1400px"></div>{scripts}<script src="data.js"></script>
<script>
const t0 = performance.now();
window.panel = new LLMCharts.Panel(document.getElementById("host"), {{}});
panel.history = LLMCharts.Series.fromColumns(DATA.history);
panel.memory = LLMCharts.Series.fromColumns(DATA.memory);
panel.now = DATA.now; panel.monitor = DATA.monitor;
panel.render();
window.firstRenderMs = performance.now() - t0;
requestAnimationFrame(() => requestAnimationFrame(() => {{ window.readyAt = performance.now(); }}));
</script></body></html>"""

POLL = """async (count) => {
  const p = window.panel, frame = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  let t = p.history.last();
  const times = [];
  for (let i = 0; i < count; i++) {
    t += 1;
    const point = Object.assign({}, p.now, {time: t}), reading = Object.assign({}, p.monitor, {time: t});
    const start = performance.now();
    p.ingest({run: p.run, history: [point], memory: [reading], now: point});
    p.render();
    document.body.getBoundingClientRect();
    times.push(performance.now() - start);
    await frame();
  }
  return times;
}"""


def history(points: int) -> dict:
    """Columns of ``points`` seconds: every charted figure, smooth with a little wobble."""
    seconds = range(points)

    def wave(base: float, amp: float, period: float) -> list[float]:
        return [round(base + amp * math.sin(s / period), 2) for s in seconds]

    columns = {
        "time": [T0 + s for s in seconds], "users": [min(64, 1 + s // 5) for s in seconds],
        "requests_per_s": wave(30, 5, 17), "failures_per_s": [0.0] * points, "output_tokens_per_s": wave(900, 80, 13),
        "ttft_p50_ms": wave(200, 8, 11), "ttft_p95_ms": wave(260, 15, 7), "tpot_p50_ms": wave(20, 1, 9),
        "e2e_p50_ms": wave(1500, 60, 19), "dispatch_lag_p99_ms": wave(3, 1, 5), "slo_attainment_pct": wave(95, 3, 23),
        "goodput_per_s": wave(28, 4, 17)}
    memory = {"time": columns["time"], "server_rss_mib": wave(900, 20, 31), "server_gpu_mib": wave(4000, 50, 29),
              "gpu_used_mib": wave(4200, 60, 37), "host_used_mib": wave(8000, 100, 41), "client_cpu_pct": wave(40, 5, 3)}
    last = points - 1
    return {"history": columns, "memory": memory, "now": {k: v[last] for k, v in columns.items()},
            "monitor": {k: v[last] for k, v in memory.items()}}


def read(revision: str, name: str) -> str | None:
    """``static/NAME`` at a git revision (``.``: the working tree); None where it is not there."""
    if revision == ".":
        path = REPO_ROOT / STATIC / name
        return path.read_text(encoding="utf-8") if path.is_file() else None
    proc = subprocess.run(["git", "show", f"{revision}:{STATIC}/{name}"], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    return proc.stdout if proc.returncode == 0 else None


def scripts_at(revision: str, way: str) -> dict[str, str]:
    """The scripts a page of that revision loads, in order: the chart library (ECharts only), llmcharts.js."""
    names = ([CHART_LIBRARY] if way == "ECharts" else []) + ["llmcharts.js"]
    scripts = {name: read(revision, name) for name in names}
    header = (scripts["llmcharts.js"] or "").split("*/", 1)[0]
    if None in scripts.values() or ("ECharts" in header) != (way == "ECharts"):
        raise ValueError(f"revision {revision!r} has no {way} charts script in {STATIC} (pass --{way.lower()} REV)")
    return scripts


def build_pages(root: Path, ways: dict[str, dict[str, str]], css: dict[str, str], points: list[int]) -> dict[str, Path]:
    """One folder per way: its scripts, its CSS and one page per N."""
    out = {}
    for way, scripts in ways.items():
        folder = root / way
        folder.mkdir()
        for name, text in {**scripts, "llmcharts.css": css[way]}.items():
            (folder / name).write_text(text, encoding="utf-8")
        tags = "".join(f'<script src="{name}"></script>' for name in scripts)
        for n in points:
            sub = folder / str(n)
            sub.mkdir()
            for name in [*scripts, "llmcharts.css"]:
                (sub / name).symlink_to(folder / name)
            (sub / "data.js").write_text("window.DATA = " + json.dumps(history(n)) + ";", encoding="utf-8")
            (sub / "index.html").write_text(PAGE.format(scripts=tags), encoding="utf-8")
        out[way] = folder
    return out


def size(scripts: dict[str, str]) -> tuple[int, int]:
    raw = sum(len(t.encode()) for t in scripts.values())
    return raw, sum(len(gzip.compress(t.encode(), 9)) for t in scripts.values())


def measure(context, page_path: Path, polls: int) -> dict:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(page_path.as_uri())
    page.wait_for_function("window.readyAt !== undefined", timeout=60_000)
    load = page.evaluate("[window.readyAt, window.firstRenderMs]")
    cdp.send("HeapProfiler.collectGarbage")
    heap = cdp.send("Runtime.getHeapUsage")["usedSize"] / 1e6

    def task_s() -> float:
        return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == "TaskDuration")

    before = task_s()
    times = page.evaluate(POLL, polls)
    task_ms = (task_s() - before) * 1000 / polls
    page.close()
    if errors:
        fail(f"the page failed: {errors[0]}", 1)
    return {"load_ms": load[0], "first_render_ms": load[1], "heap_mb": heap,
            "poll_script_ms": statistics.median(times), "poll_task_ms": task_ms}


KEYS = (("load_ms", "load to drawn, ms"), ("first_render_ms", "first render, ms"), ("heap_mb", "JS heap, MB"),
        ("poll_script_ms", "poll: script, ms"), ("poll_task_ms", "poll: main thread, ms"))


def run(points: list[int], loads: int, polls: int, ways: dict[str, dict[str, str]], css: dict[str, str],
        chromium: str) -> list[list]:
    """The table's rows; the two ways' pages are loaded in turn (SVG, ECharts, SVG, ...) so that a busy
    machine slows both alike."""
    from playwright.sync_api import sync_playwright

    sizes = {way: size(scripts) for way, scripts in ways.items()}
    rows = [["script bytes (gzip)"] + [f"{sizes[w][0]:,} ({sizes[w][1]:,})" for w in ways]
            + [f"{sizes['ECharts'][0] / sizes['SVG'][0]:.1f}x"]]
    with tempfile.TemporaryDirectory(prefix="llmload-charts-") as tmp, sync_playwright() as playwright:
        folders = build_pages(Path(tmp), ways, css, points)
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            for n in points:
                samples: dict[str, list[dict]] = {way: [] for way in ways}
                for _ in range(loads):
                    for way, folder in folders.items():
                        context = browser.new_context(viewport={"width": 1400, "height": 900})
                        samples[way].append(measure(context, folder / str(n) / "index.html", polls))
                        context.close()
                for key, label in KEYS:
                    old, new = (statistics.median(s[key] for s in samples[w]) for w in ("SVG", "ECharts"))
                    rows.append([f"{n:,} points: {label}", f"{old:.1f}", f"{new:.1f}",
                                 f"{new / old:.2f}x" if old else "-"])
        finally:
            browser.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m benchmarks.webui_charts", description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=positive_int, nargs="+", default=[60, 3600],
                        help="seconds of history on the page (default: 60 3600, a minute and the hour kept)")
    parser.add_argument("--loads", type=positive_int, default=3, help="fresh pages per figure (default: 3)")
    parser.add_argument("--polls", type=positive_int, default=20, help="polls timed per page (default: 20)")
    parser.add_argument("--svg", default=SVG_REVISION, metavar="REV",
                        help="git revision of the hand-written SVG script ('.': the working tree; default: %(default)s)")
    parser.add_argument("--echarts", default=ECHARTS_REVISION, metavar="REV",
                        help="git revision of the ECharts script and library ('.': the working tree; "
                             "default: %(default)s)")
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return print_error("no chromium on PATH: install Debian's chromium package")
    try:
        ways = {"SVG": scripts_at(args.svg, "SVG"), "ECharts": scripts_at(args.echarts, "ECharts")}
    except ValueError as exc:
        return print_error(str(exc))
    css = {way: read(rev, "llmcharts.css") or "" for way, rev in (("SVG", args.svg), ("ECharts", args.echarts))}
    rows = run(args.points, args.loads, args.polls, ways, css, chromium)
    print(render(rows, ["", "SVG (hand-written)", "ECharts", "ECharts / SVG"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
