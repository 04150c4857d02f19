"""The web UI's "LLM metrics" tab: the run-so-far table and live charts, from the fixed-size live board.

Locust 2.47's React UI renders an extended tab (``template_args``:
``extended_tabs``, ``extended_tables``, ``extended_csv_files``) as one table,
filled from an ``extended_stats`` list in its ``/stats/requests`` poll; it has
no hook for other content, and its bundle exposes neither React nor its chart
library. So the table stays Locust's own (the catalogue's headline columns,
:func:`llmload.core.metrics.headline_columns`), and the charts come from a
small script of this package (``static/llmcharts.js``, plain SVG, drawn in the
look of Locust's own charts) that Locust's page loads: the index page is
served with two extra tags, and the script puts its panel under the table
whenever the tab is open, polling ``llmload/live.json`` every 2 s while it is
shown. ``/llmload/`` shows the same table and charts on a page of their own.

Every route reads the :class:`~llmload.loadgen.live.LiveBoard` (never the raw
log, except the raw log's own download), so it costs the same at 1 k and 10 M
results: ``live.json`` sends the points newer than the client's last one, each
point serialised once (:class:`LiveFeed`); the table's rows are computed at most
once a second (:class:`TableCache`); the server's memory comes from the last
row of the monitor CSV (:class:`MonitorTail`, a 4 KiB read once a second).

Locust's HTML report (``--html``, and the web UI's report download) gets the
same table and charts, with their data inline: :func:`write_html_extras`
rewrites the written file at quit; :func:`add_report_section` does it to any
report page.
"""

from __future__ import annotations

import csv
import html
import io
import json
import os
import time
from collections import deque
from pathlib import Path

from flask import Blueprint, Response, request, send_from_directory, stream_with_context

from llmload.core.atomicfile import atomic_write_text
from llmload.core.clienterror import FLAG_SHARE, figures_of, flag_text, flags, worst
from llmload.core.metrics import RunSummary, column_scale, column_title, headline_columns
from llmload.loadgen.live import HISTORY_S

TAB_KEY = "llm-metrics"
CHUNK_BYTES = 1 << 16
STATIC_DIR = Path(__file__).with_name("static")
#: Seconds the tab's rows are reused before they are computed again (Locust polls every 2 s).
TABLE_TTL_S = 1.0
#: Points a bare ``GET /llmload/live.json`` (no ``since``) gets: the last ten minutes.
BARE_POINTS = 600
#: Bytes read from the end of the monitor CSV to find its last row.
TAIL_BYTES = 4096
#: Monitor columns charted and shown (MiB and percent).
MONITOR_FIELDS = ("server_rss_mib", "server_gpu_mib", "gpu_used_mib", "host_used_mib", "client_cpu_pct")
REPORT_BEGIN = "<!-- llmload: LLM metrics -->"
REPORT_END = "<!-- /llmload -->"


def ui_key(column: str) -> str:
    """A column's key in the polled JSON: one lower-case word (the UI camel-cases keys with underscores)."""
    return column.replace("_", "")


def columns() -> list[str]:
    return headline_columns()


#: The table's last column: the run's client-error bound, flagged where it passes 5 % of the row's figures.
CLIENT_ERROR = {"key": "clienterror", "title": "client error ms"}


def structure() -> list[dict]:
    """The table's columns as Locust's extended table declares them: ``[{"key", "title"}]``."""
    return ([{"key": "task", "title": "Task"}] + [{"key": ui_key(c), "title": column_title(c)} for c in columns()]
            + [CLIENT_ERROR])


def client_error_text(bound_s: float | None, summary: RunSummary) -> str:
    """``1.20``, or ``6.40 > 5 % of TTFT p50`` where the bound passes the share of a figure of ``summary``."""
    if bound_s is None:
        return ""
    flagged = flags(bound_s, figures_of(summary))
    return f"{bound_s * 1000:.2f}" + (f" > {FLAG_SHARE:.0%} of {flag_text(flagged)}" if flagged else "")


def summary_row(task: str, summary: RunSummary, bound_s: float | None = None) -> dict:
    """One table row (formatted strings) of a run summary, with the run's client-error bound."""
    flat = summary.flat()
    row = {"task": task}
    for column in columns():
        value = flat.get(column)
        if isinstance(value, float):
            shown = value * column_scale(column)
            row[ui_key(column)] = f"{shown:.2f}" if abs(shown) < 100 else f"{shown:.1f}"
        else:
            row[ui_key(column)] = "" if value is None else value
    row[CLIENT_ERROR["key"]] = client_error_text(bound_s, summary)
    return row


def board_rows(board) -> list[dict]:
    found = worst(board.clock)
    bound = found[1].bound if found else None
    return [summary_row(task, s, bound) for task, s in board.summaries().items()]


def dumps(data) -> str:
    """Compact JSON, safe inside a ``<script>`` element."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


# ---------------------------------------------------------------------- the live data, cheaply


class TableCache:
    """The tab's rows, computed from the board at most once per :data:`TABLE_TTL_S` (and when the board changes)."""

    def __init__(self, ttl_s: float = TABLE_TTL_S):
        self.ttl_s = ttl_s
        self._board = None
        self._at = float("-inf")
        self._rows: list[dict] = []
        self._json = "[]"

    def rows_json(self, board) -> str:
        now = time.monotonic()
        if board is not self._board or now - self._at >= self.ttl_s:
            self._board, self._at = board, now
            self._rows = board_rows(board)
            self._json = dumps(self._rows)
        return self._json


class MonitorTail:
    """The newest row of a monitor CSV that another process appends to, read from its last few KiB."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._header: list[str] | None = None
        self._header_line = b""

    def latest(self) -> dict | None:
        """``{"time", "server_rss_mib", ...}`` of the last complete row (None: no file or no row yet)."""
        try:
            with self.path.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                first = handle.readline(TAIL_BYTES)  # the header, read each time: a new monitor may rewrite the file
                if first != self._header_line:
                    self._header_line = first
                    self._header = next(csv.reader([first.decode("utf-8", "replace")]), None) \
                        if first.endswith(b"\n") else None
                start = max(len(first), size - TAIL_BYTES)
                handle.seek(start)
                block = handle.read(TAIL_BYTES)
        except OSError:
            return None
        if not self._header:
            return None
        lines = block.split(b"\n")[:-1]  # after the last newline: nothing, or a row still being written
        if start > len(self._header_line):
            lines = lines[1:]  # the block began inside that row
        for raw in reversed(lines):
            if raw.strip() and not raw.startswith(b"timestamp"):
                values = next(csv.reader([raw.decode("utf-8", "replace")]), [])
                if len(values) == len(self._header):
                    return monitor_reading(dict(zip(self._header, values)))
        return None


def _number(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def monitor_reading(row: dict) -> dict | None:
    """The charted fields of one monitor CSV row (``time`` in epoch seconds; None where not measured)."""
    when = _number(row.get("timestamp"))
    if when is None:
        return None
    return {"time": round(when, 3), **{k: _number(row.get(k)) for k in MONITOR_FIELDS}}


def read_monitor_series(path: str | os.PathLike | None, max_points: int = HISTORY_S) -> list[dict]:
    """A whole monitor CSV as readings, at most one per second and ``max_points`` in all (for the report)."""
    if path is None or not Path(path).is_file():
        return []
    by_second: dict[int, dict] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            reading = monitor_reading(row)
            if reading is not None:
                by_second[int(reading["time"])] = reading
    return [by_second[s] for s in sorted(by_second)][-max_points:]


class LiveFeed:
    """What ``live.json`` sends: the board's history and the monitor's readings, each point serialised once.

    A client asks for the points after its last one (``since``); answering costs
    what the new points cost, whatever the number of results or the length of the
    history. ``run`` changes when a new test starts (the plugin makes a new board).
    """

    def __init__(self, plugin):
        self.plugin = plugin
        self.run = 0
        self._board = None
        self._points: deque[tuple[float, str]] = deque(maxlen=HISTORY_S)
        self._memory: deque[tuple[float, str]] = deque(maxlen=HISTORY_S)
        self._tail: MonitorTail | None = None
        self._board_seen = float("-inf")
        self.monitor: dict | None = None

    def _sync(self) -> None:
        board = self.plugin.board
        if board is not self._board:
            self._board = board
            self._board_seen = time.time() - 2.0
            self.run += 1
            self._points.clear()
            self._memory.clear()
            self.monitor = None
        last = self._points[-1][0] if self._points else float("-inf")
        fresh = []
        for point in reversed(board.history):  # newest first; stops at the first point already cached
            if point["time"] <= last:
                break
            fresh.append(point)
        for point in reversed(fresh):
            self._points.append((point["time"], dumps(point)))

    @property
    def monitor_path(self) -> Path | None:
        settings = self.plugin.settings
        return settings.monitor_path if getattr(settings, "monitor_pid", None) is not None else None

    def sample_monitor(self) -> dict | None:
        """Read the monitor CSV's newest row and keep it as a point (called once a second)."""
        self._sync()
        path = self.monitor_path
        if path is None:
            return None
        if self._tail is None or self._tail.path != Path(path):
            self._tail = MonitorTail(path)
        reading = self._tail.latest()
        if reading is None or (self._memory and reading["time"] <= self._memory[-1][0]):
            return reading
        if reading["time"] < self._board_seen:
            return None  # a row of an earlier test's file, not yet rewritten by this test's monitor
        self.monitor = reading
        self._memory.append((reading["time"], dumps(reading)))
        return reading

    @staticmethod
    def _after(items: deque, since: float, limit: int) -> list[str]:
        fresh = []
        for when, text in reversed(items):
            if when <= since or len(fresh) >= limit:
                break
            fresh.append(text)
        fresh.reverse()
        return fresh

    def payload(self, run: int | None = None, since: float = 0.0, msince: float = 0.0, users: int = 0,
                state: str = "", limit: int = HISTORY_S) -> str:
        """The JSON text of one answer: the points after ``since`` (and the readings after ``msince``), the newest
        ``limit`` of them; all of them when ``run`` is not the current run."""
        self._sync()
        if run != self.run:
            since = msince = float("-inf")
        window = self.plugin.board.window()
        window["users"] = users
        head = {"run": self.run, "state": state, "window_s": window.get("window_s"), "now": window,
                "parts": self.plugin.board.parts(), "monitor": self.monitor,
                "monitoring": self.monitor_path is not None}
        text = dumps(head)[:-1]
        return (text + ',"history":[' + ",".join(self._after(self._points, since, limit)) + '],"memory":['
                + ",".join(self._after(self._memory, msince, limit)) + "]}")


# ---------------------------------------------------------------------- the web UI


def _page_snippet(base: str) -> str:
    config = {"tabKey": TAB_KEY, "anchor": ui_key("ttft_p50"), "base": base}
    return (f'<link rel="stylesheet" href="{base}static/llmcharts.css">'
            f'<script>window.llmloadConfig = {dumps(config)};</script>'
            f'<script src="{base}static/llmcharts.js"></script>'
            '<script>LLMCharts.attachToLocust(window.llmloadConfig);</script>')


def _insert_before_body_end(page: str, snippet: str) -> str:
    at = page.rfind("</body>")
    return page + snippet if at < 0 else page[:at] + snippet + page[at:]


def install(environment, plugin, monitor_sampler: bool = True) -> None:
    """Add the tab, its charts, the routes and the report section to ``environment.web_ui``.

    ``monitor_sampler``: read the monitor CSV's newest row once a second in a greenlet (for the memory chart).
    """
    web_ui = environment.web_ui
    app = web_ui.app
    locust_blueprint = app.blueprints.get("locust")
    prefix = (getattr(locust_blueprint, "url_prefix", None) or "").rstrip("/")
    web_ui.template_args["extended_tabs"] = [{"title": "LLM metrics", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": structure()}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llmload/requests.jsonl", "title": "Download raw per-request log (JSONL)"},
        {"href": "./llmload/summary.csv", "title": "Download LLM metrics summary CSV"},
        {"href": "./llmload/", "title": "LLM metrics and charts on a page of their own"},
    ]
    table = TableCache()
    feed = LiveFeed(plugin)
    snippet = _page_snippet("./llmload/")

    def runner_state() -> tuple[int, str]:
        runner = environment.runner
        return getattr(runner, "user_count", 0), getattr(runner, "state", "")

    @app.after_request
    def add_llm_metrics(response):
        endpoint = request.endpoint or ""
        if endpoint == "locust.request_stats" and response.is_json:
            # Locust memoizes this view's Response for 2 s: splice into its original body, once per answer.
            base = getattr(response, "llmload_base", None)
            if base is None:
                base = response.get_data().rstrip()
                response.llmload_base = base
            if base.endswith(b"}"):
                extended = ('"extended_stats":[{"key":' + dumps(TAB_KEY) + ',"data":'
                            + table.rows_json(plugin.board) + "}]").encode()
                response.set_data(base[:-1] + (b"," if base[:-1].rstrip() != b"{" else b"") + extended + b"}")
        elif endpoint == "locust.index" and response.mimetype == "text/html":
            response.set_data(_insert_before_body_end(response.get_data(as_text=True), snippet))
        elif endpoint == "locust.stats_report" and response.mimetype == "text/html":
            response.set_data(add_report_section(response.get_data(as_text=True), plugin, feed.monitor_path))
        return response

    blueprint = Blueprint("llmload", __name__, url_prefix=f"{prefix}/llmload")

    @blueprint.route("/")
    @web_ui.auth_required_if_enabled
    def page() -> Response:
        return send_from_directory(STATIC_DIR, "index.html", max_age=0)

    @blueprint.route("/static/<path:name>")
    @web_ui.auth_required_if_enabled
    def static_file(name: str) -> Response:
        return send_from_directory(STATIC_DIR, name, max_age=0)

    @blueprint.route("/live.json")
    @web_ui.auth_required_if_enabled
    def live() -> Response:
        args = request.args
        users, state = runner_state()
        # the page sends run and since (its last point); a bare GET gets the last BARE_POINTS points
        text = feed.payload(run=args.get("run", type=int), since=args.get("since", 0.0, type=float),
                            msince=args.get("msince", 0.0, type=float), users=users, state=state,
                            limit=HISTORY_S if "since" in args else BARE_POINTS)
        return Response(text, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @blueprint.route("/summary.json")
    @web_ui.auth_required_if_enabled
    def summary_json() -> Response:
        text = '{"structure":' + dumps(structure()) + ',"rows":' + table.rows_json(plugin.board) + "}"
        return Response(text, mimetype="application/json", headers={"Cache-Control": "no-store"})

    @blueprint.route("/requests.jsonl")
    @web_ui.auth_required_if_enabled
    def raw_log() -> Response:
        import gevent

        path = plugin.raw_log.path if plugin.raw_log is not None else None
        if path is None or not path.is_file():
            return Response("no raw log: give --csv PREFIX or --raw-log PATH\n", status=404, mimetype="text/plain")
        if not plugin.raw_log.closed:
            plugin.raw_log.flush()

        def chunks():
            with path.open("rb") as handle:
                while block := handle.read(CHUNK_BYTES):
                    yield block
                    gevent.sleep(0)  # a long log must not hold the loop: other greenlets run between blocks

        return Response(stream_with_context(chunks()), mimetype="application/x-ndjson",
                        headers={"Content-Disposition": "attachment;filename=requests.jsonl"})

    @blueprint.route("/summary.csv")
    @web_ui.auth_required_if_enabled
    def summary_csv() -> Response:
        out = io.StringIO()
        writer = None
        for task, s in plugin.board.summaries().items():
            row = {"task": task, **s.flat()}
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
        return Response(out.getvalue(), mimetype="text/csv",
                        headers={"Content-Disposition": "attachment;filename=llm_summary.csv"})

    app.register_blueprint(blueprint)
    if monitor_sampler:
        _spawn_monitor_sampler(feed)


def _spawn_monitor_sampler(feed: LiveFeed) -> None:
    """Once a second, keep the monitor CSV's newest row (a few KiB read; nothing without --monitor-pid)."""
    import gevent

    def sample() -> None:
        while True:
            gevent.sleep(1.0)
            try:
                feed.sample_monitor()
            except Exception:  # the charts go without memory rather than the UI failing
                pass

    gevent.spawn(sample)


# ---------------------------------------------------------------------- the HTML report


def _columns_of(points: list[dict], keys: tuple[str, ...]) -> dict[str, list]:
    return {key: [p.get(key) for p in points] for key in keys}


HISTORY_KEYS = ("time", "users", "requests_per_s", "failures_per_s", "output_tokens_per_s", "ttft_p50_ms",
                "ttft_p95_ms", "tpot_p50_ms", "e2e_p50_ms", "dispatch_lag_p99_ms", "slo_attainment_pct",
                "goodput_per_s")


def report_data(plugin, monitor_path: str | os.PathLike | None = None) -> dict:
    """The table rows and the charts' series of a run (history columns, monitor readings) as one dict."""
    points = list(plugin.board.history)
    memory = read_monitor_series(monitor_path)
    return {"structure": structure(), "rows": board_rows(plugin.board),
            "window_s": plugin.board.window_s, "monitoring": monitor_path is not None,
            "history": _columns_of(points, HISTORY_KEYS), "memory": _columns_of(memory, ("time",) + MONITOR_FIELDS)}


def report_section(plugin, monitor_path: str | os.PathLike | None = None) -> str:
    """The HTML the report gets: the LLM metrics table, the charts (script and data inline), between markers."""
    data = report_data(plugin, monitor_path)
    head = "".join(f"<th>{html.escape(c['title'])}</th>" for c in data["structure"])
    body = "".join("<tr>" + "".join(f'<td data-key="{html.escape(c["key"])}">{html.escape(str(row.get(c["key"], "")))}'
                                    "</td>" for c in data["structure"]) + "</tr>" for row in data["rows"])
    css = (STATIC_DIR / "llmcharts.css").read_text(encoding="utf-8")
    js = (STATIC_DIR / "llmcharts.js").read_text(encoding="utf-8").replace("</script", "<\\/script")
    return (f"{REPORT_BEGIN}<style>{css}</style>"
            '<section id="llmload-report" class="llmload-report">'
            "<h2>LLM metrics</h2>"
            f'<p class="llmload-note">Run so far, per task (percentiles from sketches, within 1 %); the charts show, '
            f"once a second, the last {data['window_s']} s.</p>"
            f'<div class="llmload-table-wrap"><table class="llmload-table" id="llmload-report-table">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            '<div id="llmload-report-charts"></div></section>'
            f'<script type="application/json" id="llmload-report-data">{dumps(data)}</script>'
            f"<script>{js}</script>"
            "<script>LLMCharts.report(document.getElementById('llmload-report'), "
            "JSON.parse(document.getElementById('llmload-report-data').textContent));</script>"
            f"{REPORT_END}")


def add_report_section(page: str, plugin, monitor_path: str | os.PathLike | None = None) -> str:
    """``page`` (a Locust HTML report) with the LLM section, replacing one added before."""
    begin, end = page.find(REPORT_BEGIN), page.find(REPORT_END)
    if begin >= 0 and end > begin:
        page = page[:begin] + page[end + len(REPORT_END):]
    return _insert_before_body_end(page, report_section(plugin, monitor_path))


def write_html_extras(environment, plugin, path: str | os.PathLike | None = None) -> Path | None:
    """Add the LLM section to the HTML report Locust wrote (``--html``); call at quit. Returns the path, or None.

    Locust writes the report just before it fires ``quit`` (``options.html_file`` then holds the final
    name, its ``{u}``/``{r}``/``{t}`` replaced), so the plugin's ``on_quit`` calls this.
    """
    if path is None:
        path = getattr(environment.parsed_options, "html_file", None) if environment.parsed_options else None
    if not path or not Path(path).is_file():
        return None
    path = Path(path)
    settings = plugin.settings
    monitor_path = settings.monitor_path if getattr(settings, "monitor_pid", None) is not None else None
    page = add_report_section(path.read_text(encoding="utf-8"), plugin, monitor_path)
    return atomic_write_text(path, page)
