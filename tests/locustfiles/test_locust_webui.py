"""The web UI: the "LLM metrics" tab (table from the stats poll, charts from /llmload/live.json), the routes' cost,
the monitor tail, and the LLM section of Locust's HTML report.

The tab's charts are checked in a real browser in ``test_webui_browser.py``; here the
same routes are read over HTTP during a real run against the mock engine (200 ms to the
first token, 20 ms between tokens), and their cost is timed in-process on a board fed
100 k synthetic results (Flask only: this process never imports Locust).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from locust_helpers import ITL_MS, TTFT_MS, locust_command, output, run_locust, write_prompts
from llmload.core.metrics import RequestResult, request_metrics
from llmload.core.paths import REPO_ROOT
from llmload.core.services import free_port
from llmload.loadgen import webui
from llmload.loadgen.live import HISTORY_S, LiveBoard

REQUESTS = 20
#: The TTFT p50 shown (a sketch's quantile, within 1 %: about 2 ms at 200 ms) may exceed the mock's 200 ms by the
#: loopback and the client's scheduling on this busy 2-core machine; 196-212 ms allows both.
TTFT_LOW_MS, TTFT_HIGH_MS = TTFT_MS - 4.0, TTFT_MS + 12.0
#: A poll may block the gevent loop for about a millisecond at most (medians over repeated calls).
POLL_BUDGET_MS = 1.0

def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


@pytest.mark.integration
@pytest.mark.serial
@pytest.mark.slow
def test_llm_metrics_tab_shows_live_exact_figures(mock_server, tmp_path):
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    cmd = locust_command("chat.py", url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                         "--autoquit", "2", "-u", "2", "-r", "2", "--requests", str(REQUESTS), "--max-tokens", "10",
                         "--ignore-eos", "--dataset", str(prompts))
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        rows, live = [], {}
        while time.monotonic() < deadline:
            try:
                stats = json.loads(get(f"{web}/stats/requests"))
                live = json.loads(get(f"{web}/llmload/live.json"))
            except OSError:
                time.sleep(0.3)
                continue
            tabs = {tab["key"]: tab["data"] for tab in stats.get("extended_stats", [])}
            rows = tabs.get("llm-metrics", [])
            if rows and rows[0]["requests"] == REQUESTS and stats["state"] == "stopped":
                break
            time.sleep(0.3)
        assert rows and rows[0]["task"] == "chat" and rows[0]["requests"] == REQUESTS, rows
        row = rows[0]
        assert TTFT_LOW_MS <= float(row["ttftp50"]) <= TTFT_HIGH_MS and 15 <= float(row["tpotmean"]) <= 30
        assert float(row["outputtokenthroughput"]) > 0 and float(row["requestthroughput"]) > 0
        # the Aggregated row that the charts plot counts requests only, not the METRIC rows
        total = next(s for s in stats["stats"] if s["name"] == "Aggregated")
        assert total["num_requests"] == REQUESTS
        assert {s["name"] for s in stats["stats"] if s["method"] == "METRIC"} == {"chat TTFT", "chat TPOT"}
        assert list(stats).count("extended_stats") == 1 and stats["stats"]  # spliced once into Locust's answer

        page = get(f"{web}/").decode()
        assert "LLM metrics" in page and "ttftp50" in page  # the tab and its table are declared
        assert "llmload/static/llmcharts.js" in page and "LLMCharts.attachToLocust" in page  # and its charts
        assert b"LLMCharts" in get(f"{web}/llmload/static/llmcharts.js")
        assert b"LLMCharts.page" in get(f"{web}/llmload/")
        # live.json: one point a second, each the last 10 s; TTFT as the mock's
        points = [p for p in live["history"] if p["ttft_p50_ms"] is not None]
        assert live["run"] >= 1 and live["window_s"] == 10 and points, live
        # the first second's window holds a request or two, whose first connection may add 30 ms: the last point
        # (the most requests) and the median point are the mock's 200 ms
        shown = [p["ttft_p50_ms"] for p in points]
        assert TTFT_LOW_MS <= shown[-1] <= TTFT_HIGH_MS and TTFT_LOW_MS <= statistics.median(shown) <= TTFT_HIGH_MS, \
            shown
        assert all(abs(p["tpot_p50_ms"] - ITL_MS) <= 3 for p in points if p["tpot_p50_ms"] is not None)
        later = json.loads(get(f"{web}/llmload/live.json?run={live['run']}&since={live['history'][-1]['time']}"))
        assert all(p["time"] > live["history"][-1]["time"] for p in later["history"])  # only newer points
        assert live["monitoring"] is False and live["memory"] == []
        summary_json = json.loads(get(f"{web}/llmload/summary.json"))
        assert summary_json["rows"][0]["requests"] == REQUESTS and summary_json["structure"][0]["key"] == "task"

        raw = get(f"{web}/llmload/requests.jsonl").decode().splitlines()
        assert len(raw) == REQUESTS and all(json.loads(line)["success"] for line in raw)
        summary = get(f"{web}/llmload/summary.csv").decode().splitlines()
        assert summary[0].startswith("task,requests,failures") and summary[1].startswith(f"chat,{REQUESTS},0")
        report = get(f"{web}/stats/report").decode()  # the UI's report download carries the LLM section too
        assert report.count('id="llmload-report"') == 1 and "LLMCharts.report" in report
        out, _ = proc.communicate(timeout=30)  # --autoquit ends it
        assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# ---------------------------------------------------------------------- cost of a poll


def synthetic_result(i: int, start: float, task: str) -> RequestResult:
    offsets = [0.2 + 0.02 * k for k in range(8)]
    return RequestResult(request_id=str(i), task=task, api="chat", mode="stream", start_time=start,
                         end_offset=offsets[-1], token_offsets=offsets, output_tokens=8,
                         output_tokens_source="usage", intended_start=start - 0.001, slo_ok=i % 3 != 0)


def fed_board(count: int) -> LiveBoard:
    """A board fed ``count`` results ending over the last 8 s, with a full hour of history (one point a second)."""
    board = LiveBoard()
    now = time.time()
    for i in range(count):
        result = synthetic_result(i, now - 8.4 + 8.0 * i / count, "chat" if i % 2 else "qa")
        board.add(result, request_metrics(result))
    point = board.window()
    for k in range(HISTORY_S):
        board.history.append({**point, "time": now - HISTORY_S + k, "users": 8})
    return board


def fake_ui(board: LiveBoard):
    """Locust's WebUI as install() sees it: a Flask app whose 'locust' blueprint has Locust's endpoint names."""
    from flask import Blueprint, Flask, jsonify

    app = Flask("fake-locust")
    locust_bp = Blueprint("locust", "fake-locust")

    @locust_bp.route("/stats/requests")
    def request_stats():
        return jsonify({"stats": [{"name": "Aggregated", "num_requests": 1}], "errors": [], "state": "running"})

    @locust_bp.route("/")
    def index():
        return "<html><body><div id='root'></div></body></html>"

    app.register_blueprint(locust_bp)
    web_ui = SimpleNamespace(app=app, template_args={}, auth_required_if_enabled=lambda view: view)
    plugin = SimpleNamespace(board=board, settings=SimpleNamespace(monitor_pid=None, monitor_path=None),
                             raw_log=None)
    environment = SimpleNamespace(web_ui=web_ui, runner=SimpleNamespace(user_count=8, state="running"))
    webui.install(environment, plugin, monitor_sampler=False)
    return app.test_client(), plugin


def median_ms(call, repeat: int = 30) -> float:
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def poll_costs(board: LiveBoard) -> dict[str, float]:
    client, plugin = fake_ui(board)
    feed = webui.LiveFeed(plugin)
    feed.payload()
    last = board.history[-1]["time"]

    def incremental():  # what a page polling every 2 s asks: the points of the last 2 s
        return feed.payload(run=feed.run, since=last - 2.0)

    table = webui.TableCache(ttl_s=0.0)  # no reuse: every call computes the rows
    return {
        "window()": median_ms(board.window),
        "summaries() + table rows": median_ms(lambda: table.rows_json(board)),
        "live.json, new points": median_ms(incremental),
        "live.json, whole hour (page opened)": median_ms(lambda: feed.payload(run=None), repeat=10),
        "GET /stats/requests (Flask, rows reused)": median_ms(lambda: client.get("/stats/requests").data),
        "GET /llmload/live.json (Flask, new points)": median_ms(
            lambda: client.get(f"/llmload/live.json?run=1&since={last - 2.0}").data),
    }


@pytest.mark.unit
@pytest.mark.serial
def test_polls_cost_the_same_at_1k_and_100k_results():
    small, large = poll_costs(fed_board(1_000)), poll_costs(fed_board(100_000))
    for name in small:
        print(f"MEASURED {name}: {small[name]:.3f} ms at 1 k results, {large[name]:.3f} ms at 100 k")
    for name in small:
        assert large[name] <= 3 * small[name] + 0.3, (name, small[name], large[name])  # no growth with results
    # what a poll blocks the loop for, at 100 k results
    assert large["window()"] < POLL_BUDGET_MS and large["live.json, new points"] < POLL_BUDGET_MS, large
    assert large["summaries() + table rows"] < 3 * POLL_BUDGET_MS, large  # at most once a second (TableCache)
    assert large["live.json, whole hour (page opened)"] < 10 * POLL_BUDGET_MS, large  # once per page load


@pytest.mark.unit
def test_stats_poll_is_spliced_once_and_pages_get_the_charts():
    client, plugin = fake_ui(fed_board(100))
    for _ in range(3):  # Locust memoizes its Response object: the splice must not pile up
        data = client.get("/stats/requests").get_data(as_text=True)
        assert data.count('"extended_stats"') == 1
        stats = json.loads(data)
        assert stats["stats"][0]["name"] == "Aggregated" and stats["extended_stats"][0]["key"] == webui.TAB_KEY
        assert {r["task"] for r in stats["extended_stats"][0]["data"]} == {"chat", "qa", "all"}
    page = client.get("/").get_data(as_text=True)
    assert page.index("llmcharts.js") < page.index("</body>")
    live = client.get("/llmload/live.json").get_json()  # a bare GET: the last ten minutes
    assert len(live["history"]) == webui.BARE_POINTS
    assert live["now"]["users"] == 8 and live["now"]["requests_per_s"] > 0
    whole = client.get("/llmload/live.json?since=0").get_json()  # the page, opened: the whole history
    assert len(whole["history"]) == HISTORY_S and whole["history"][-1] == live["history"][-1]
    again = client.get(f"/llmload/live.json?run={live['run']}&since={live['history'][-1]['time']}").get_json()
    assert again["history"] == [] and again["run"] == live["run"]
    plugin.board = LiveBoard()  # a new test: a new run, everything sent again
    fresh = client.get(f"/llmload/live.json?run={live['run']}&since=0").get_json()
    assert fresh["run"] == live["run"] + 1 and fresh["history"] == []
    assert client.get("/llmload/static/llmcharts.css").status_code == 200
    assert client.get("/llmload/static/../webui.py").status_code == 404


# ---------------------------------------------------------------------- the monitor's memory


@pytest.mark.unit
def test_monitor_tail_reads_the_newest_complete_row(tmp_path):
    path = tmp_path / "monitor.csv"
    tail = webui.MonitorTail(path)
    assert tail.latest() is None  # no file yet
    header = "timestamp,elapsed_s,host_used_mib,server_rss_mib,client_cpu_pct,server_gpu_mib\n"
    path.write_text(header)
    assert tail.latest() is None  # no row yet
    rows = [f"{1000 + i / 2:.3f},{i / 2},{900 + i},{50 + i},{10.5},\n" for i in range(400)]  # > TAIL_BYTES
    path.write_text(header + "".join(rows) + "1200.0,200,9")  # the last row still being written
    reading = tail.latest()
    assert reading == {"time": 1199.5, "server_rss_mib": 449.0, "server_gpu_mib": None, "gpu_used_mib": None,
                       "host_used_mib": 1299.0, "client_cpu_pct": 10.5}
    path.unlink()
    path.write_text("timestamp,server_rss_mib,server_gpu_mib\n5.0,60,7000\n")  # a new monitor, other columns
    assert tail.latest()["server_gpu_mib"] == 7000.0
    assert webui.read_monitor_series(path) == [{"time": 5.0, "server_rss_mib": 60.0, "server_gpu_mib": 7000.0,
                                                "gpu_used_mib": None, "host_used_mib": None,
                                                "client_cpu_pct": None}]


@pytest.mark.unit
def test_live_feed_keeps_the_monitor_readings_of_this_run(tmp_path):
    path = tmp_path / "run_monitor.csv"
    path.write_text("timestamp,server_rss_mib,server_gpu_mib\n1.0,10,\n")  # an earlier run's file
    board = LiveBoard()
    plugin = SimpleNamespace(board=board, settings=SimpleNamespace(monitor_pid=123, monitor_path=path))
    feed = webui.LiveFeed(plugin)
    assert feed.sample_monitor() is None and feed.monitor is None  # older than this run: not shown
    now = time.time()
    with path.open("a") as handle:
        handle.write(f"{now:.3f},52.5,\n")
    assert feed.sample_monitor()["server_rss_mib"] == 52.5
    feed.sample_monitor()  # the same row again: kept once
    live = json.loads(feed.payload())
    assert live["monitoring"] is True and live["monitor"]["server_rss_mib"] == 52.5
    assert [m["server_rss_mib"] for m in live["memory"]] == [52.5]


# ---------------------------------------------------------------------- the HTML report


def report_parts(page: str) -> tuple[dict, dict]:
    """The LLM table's first row ({column title: text}) and the charts' inline data of a report page."""
    table = re.search(r'<table class="llmload-table" id="llmload-report-table">(.*?)</table>', page, re.S).group(1)
    titles = re.findall(r"<th>(.*?)</th>", table)
    cells = re.findall(r'<td data-key="[^"]*">(.*?)</td>', table)
    data = re.search(r'<script type="application/json" id="llmload-report-data">(.*?)</script>', page, re.S)
    return dict(zip(titles, cells[: len(titles)])), json.loads(data.group(1))


def html_report_run(mock_server, tmp_path) -> Path:
    """A 24-request run against the mock with the monitor on; Locust's ``--html`` report (its path)."""
    url, server_pid = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    report = tmp_path / "report.html"
    proc = run_locust("chat.py", url, "-u", "2", "-r", "2", "--requests", "24", "-t", "60s",
                      "--max-tokens", "10", "--ignore-eos", "--dataset", str(prompts), "--csv", str(tmp_path / "run"),
                      "--monitor-pid", str(server_pid), "--html", str(report))
    assert proc.returncode == 0, output(proc)[-3000:]
    return report


@pytest.mark.integration
@pytest.mark.serial
@pytest.mark.slow
def test_html_report_has_the_llm_table_and_charts(mock_server, tmp_path):
    page = html_report_run(mock_server, tmp_path).read_text(encoding="utf-8")
    assert '"requests_statistics"' in page and "window.templateArgs" in page  # Locust's own report is intact
    assert page.count(webui.REPORT_BEGIN) == 1 and page.index(webui.REPORT_END) < page.rindex("</body>")
    row, data = report_parts(page)
    assert row["Task"] == "chat" and row["requests"] == "24", row
    assert TTFT_LOW_MS <= float(row["TTFT p50 ms"]) <= TTFT_HIGH_MS, row
    history = data["history"]
    ttft = [v for v in history["ttft_p50_ms"] if v is not None]
    assert len(history["time"]) >= 3 and ttft and all(TTFT_LOW_MS <= v <= TTFT_HIGH_MS for v in ttft), history
    assert max(history["output_tokens_per_s"]) > 0 and max(history["users"]) == 2
    assert data["monitoring"] and [v for v in data["memory"]["server_rss_mib"] if v], data["memory"]
    assert "LLMCharts.report" in page


@pytest.mark.unit
def test_report_section_is_replaced_not_added_twice(tmp_path):
    board = fed_board(200)
    plugin = SimpleNamespace(board=board, settings=SimpleNamespace(monitor_pid=None, monitor_path=None))
    path = tmp_path / "report.html"
    path.write_text("<html><body><div id='root'></div><script>window.templateArgs = {}</script></body></html>")
    environment = SimpleNamespace(parsed_options=SimpleNamespace(html_file=str(path)))
    assert webui.write_html_extras(environment, plugin) == path
    assert webui.write_html_extras(environment, plugin) == path
    page = path.read_text()
    assert page.count(webui.REPORT_BEGIN) == 1 and page.count(webui.REPORT_END) == 1
    row, data = report_parts(page)
    assert {row["Task"]} <= {"all", "chat", "qa"} and len(data["history"]["time"]) == HISTORY_S
    assert webui.write_html_extras(SimpleNamespace(parsed_options=SimpleNamespace(html_file=None)), plugin) is None
    assert webui.write_html_extras(environment, plugin, tmp_path / "missing.html") is None
