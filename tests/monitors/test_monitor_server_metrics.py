"""The monitor's server metric columns: from vLLM's /metrics (canned 0.32 text), the basic server's, none.

``vllm_metrics.prom`` is vLLM 0.32's exposition format (names, help, labels,
``_total``/``_created`` series, TTFT buckets) for two engines, with ``$``
placeholders; the tiny server below fills them from its scrape count ``k``:
running 2 + 1, waiting 1 + 1, KV use 0.2 and 0.3, prefix-cache queries
1000k + 1000k with hits 600k + 900k (75 % per interval), TTFT 2k requests per
engine with sums 0.1k s and 0.3k s (100 ms mean per interval).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from string import Template

import httpx
import pytest

import monitors.sampler

from llmload.core.services import free_port
from monitors.sampler import peak_usage, read_monitor, start_monitor
from monitors.server_metrics import METRIC_COLUMNS, MetricsProbe, columns_from, parse_metrics

REPO = Path(__file__).resolve().parents[2]
VLLM_TEXT = Template((Path(__file__).parent / "vllm_metrics.prom").read_text())
EXPECTED = {"server_running": 3, "server_waiting": 2, "server_kv_cache_pct": 25, "server_prefix_cache_hit_pct": 75,
            "server_ttft_mean_ms": 100}


def vllm_text(k: int) -> str:
    return VLLM_TEXT.substitute(running0="2.0", running1="1.0", waiting0="1.0", waiting1="1.0", kv0="0.2", kv1="0.3",
                                queries0=f"{1000.0 * k}", queries1=f"{1000.0 * k}", hits0=f"{600.0 * k}",
                                hits1=f"{900.0 * k}", ttft_count0=f"{2.0 * k}", ttft_sum0=f"{0.1 * k}",
                                ttft_count1=f"{2.0 * k}", ttft_sum1=f"{0.3 * k}")


def local_http(answer) -> ThreadingHTTPServer:
    """A local HTTP server in a thread: ``answer(path)`` gives each GET's (status, content type, body)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, content_type, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def metrics_url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/metrics"


@pytest.fixture
def canned_vllm():
    """A local HTTP server answering /metrics with the canned vLLM text (scrape k has counters x k)."""
    scrapes = []

    def answer(path: str) -> tuple[int, str, bytes]:
        scrapes.append(time.monotonic())
        return 200, "text/plain; version=0.0.4; charset=utf-8", vllm_text(len(scrapes)).encode()

    server = local_http(answer)
    yield metrics_url(server)
    server.shutdown()
    server.server_close()


def monitor_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitors", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def metric_notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "server metrics" in line]


@pytest.mark.unit
def test_canned_vllm_text_parses_into_the_columns():
    first, second = parse_metrics(vllm_text(1)), parse_metrics(vllm_text(2))
    assert first.server == "vllm" and (first.running, first.waiting, first.kv_cache_usage) == (3, 2, 0.25)
    assert (first.prefix_cache_queries, first.prefix_cache_hits, first.ttft_count) == (2000, 1500, 4)
    columns = columns_from(second, first)
    assert columns == pytest.approx(EXPECTED)
    # The first scrape has no interval yet; a counter that went back (a restart) gives no figure either.
    assert columns_from(first, None)["server_prefix_cache_hit_pct"] is None
    assert columns_from(first, second)["server_ttft_mean_ms"] is None
    # A series that appears between two scrapes started at 0 in between.
    assert columns_from(second, replace(first, ttft_sum=None, ttft_count=None))["server_ttft_mean_ms"] == \
        pytest.approx(100)
    assert parse_metrics("# TYPE other gauge\nother 1.0\n") is None


@pytest.mark.integration
@pytest.mark.serial
def test_vllm_metrics_through_the_monitor_cli(canned_vllm, tmp_path):
    out = tmp_path / "monitor.csv"
    done = monitor_cli("--out", str(out), "--metrics-url", canned_vllm, "--interval", "0.2", "--duration", "1.4")
    assert done.returncode == 0, done.stderr
    assert metric_notices(done.stderr) == []
    frame = read_monitor(out)
    full = frame.dropna(subset=METRIC_COLUMNS)
    assert len(full) >= 3, frame[METRIC_COLUMNS]
    for column, value in EXPECTED.items():
        assert (full[column] == value).all(), (column, full[column])
    peaks = peak_usage(frame)
    assert (peaks["peak_server_running"], peaks["peak_server_waiting"], peaks["peak_server_kv_cache_pct"],
            peaks["mean_server_prefix_cache_hit_pct"]) == (3, 2, 25, 75)


@pytest.mark.integration
def test_basic_server_metrics_show_the_requests_in_flight(server_factory, tmp_path):
    url = server_factory("mock", "--mock-ttft-ms", "1500", "--mock-itl-ms", "10", "--log-level", "warning")
    csv = tmp_path / "monitor.csv"
    body = {"prompt": "hi", "max_tokens": 4, "stream": True}
    with start_monitor(csv, server_pid=server_factory.processes[-1].pid, interval=0.2,
                       metrics_url=url + "/metrics"):
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda _: httpx.post(url + "/v1/completions", json=body, timeout=30), range(4)))
        time.sleep(0.6)  # a few samples after the answers
    assert all(a.status_code == 200 for a in answers)
    frame = read_monitor(csv)
    assert frame["server_running"].max() == 4, frame["server_running"].tolist()
    assert frame["server_running"].iloc[-1] == 0 and (frame["server_waiting"].dropna() == 0).all()
    assert frame["server_kv_cache_pct"].isna().all() and frame["server_prefix_cache_hit_pct"].isna().all()
    ttft = frame["server_ttft_mean_ms"].dropna()
    assert len(ttft) >= 1 and ((ttft >= 1400) & (ttft <= 4000)).all(), ttft.tolist()
    assert peak_usage(frame)["peak_server_running"] == 4


@pytest.mark.integration
@pytest.mark.serial
def test_unreachable_metrics_leave_the_columns_empty_with_one_notice(tmp_path):
    out = tmp_path / "monitor.csv"
    done = monitor_cli("--out", str(out), "--metrics-url", f"http://127.0.0.1:{free_port()}/metrics",
                       "--interval", "0.1", "--duration", "0.6")
    assert done.returncode == 0, done.stderr
    notices = metric_notices(done.stderr)
    assert len(notices) == 1 and "no server metrics from http://127.0.0.1:" in notices[0], done.stderr
    assert "(Connection refused)" in notices[0] and "Error" not in notices[0]  # words, no exception name
    frame = read_monitor(out)
    assert 6 <= len(frame) <= 8 and frame[METRIC_COLUMNS].isna().all().all()
    assert peak_usage(frame)["peak_server_running"] is None


@pytest.mark.integration
@pytest.mark.serial
def test_a_hanging_metrics_endpoint_never_delays_the_samples(tmp_path):
    """A server that accepts connections and never answers: samples keep their 0.1 s schedule."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # connections complete in the backlog, no answer ever comes
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
        out = tmp_path / "monitor.csv"
        done = monitor_cli("--out", str(out), "--metrics-url", url, "--interval", "0.1", "--duration", "2.5")
    assert done.returncode == 0, done.stderr  # the scrape's timeout (2 s) passed during the run
    frame = read_monitor(out)
    assert 25 <= len(frame) <= 27 and frame["elapsed_s"].diff().max() < 0.3, frame["elapsed_s"].tolist()
    assert frame[METRIC_COLUMNS].isna().all().all()
    assert len(metric_notices(done.stderr)) == 1 and "(no answer within 2 s)" in done.stderr


@pytest.fixture
def page_server():
    """``page_server(status, content_type, body)``: a local HTTP server answering every GET so, its /metrics URL;
    ``page_server.gets``: the paths asked for, by all of them."""
    servers, gets = [], []

    def start(status: int, content_type: str, body: bytes) -> str:
        def answer(path: str) -> tuple[int, str, bytes]:
            gets.append(path)
            return status, content_type, body

        servers.append(local_http(answer))
        return metrics_url(servers[-1])

    start.gets = gets
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def probe_notices(url: str, seconds: float = 0.4) -> list[str]:
    """The notices of a probe scraping ``url`` every 0.05 s for ``seconds``; its columns stay empty throughout."""
    notices = []
    probe = MetricsProbe(url, 0.05, notices.append)
    try:
        time.sleep(seconds)
        assert probe.read() == dict.fromkeys(METRIC_COLUMNS)
    finally:
        probe.close()
    return notices


@pytest.mark.parametrize("status, content_type, body, answered", [
    (404, "application/json", b'{"detail":"Not Found"}', "HTTP 404"),
    (200, "text/html", b"<!doctype html>\n<html><body>\n{ a: 1 }\n</body></html>\n", "text/html"),
    (200, "application/json", b'{"detail": "metrics are elsewhere"}\n{"up": 1}\n', "application/json"),
], ids=["404", "html", "json"])
@pytest.mark.unit
def test_a_server_without_prometheus_metrics_is_said_once_without_an_exception_name(page_server, status, content_type,
                                                                                    body, answered):
    url = page_server(status, content_type, body)
    assert probe_notices(url) == [f"no Prometheus metrics at {url}; the server columns stay empty "
                                  f"(it answered {answered})"]
    assert page_server.gets == ["/metrics"]  # the answer will not change: scraped once


@pytest.mark.unit
def test_probe_reads_nothing_from_a_page_without_known_metrics(page_server):
    url = page_server(200, "text/plain; version=0.0.4", b"# TYPE up gauge\nup 1.0\n")
    (notice,) = probe_notices(url)
    assert notice.startswith(f"no vLLM or basic-server metric names at {url}; the server columns stay empty")
    assert page_server.gets == ["/metrics"]


@pytest.mark.integration
def test_a_run_says_once_that_a_server_has_no_metrics(page_server, tmp_path, capfd, monkeypatch):
    """The runner starts one monitor per cell: the first says it, the next ones (same URL) do not repeat it."""
    monkeypatch.setattr(monitors.sampler, "_metrics_urls_seen", set())  # as in a fresh process
    url = page_server(404, "text/html", b"<html>not here</html>")
    for name in ("a.csv", "b.csv", "c.csv"):
        with start_monitor(tmp_path / name, interval=0.1, metrics_url=url):
            time.sleep(0.3)
        assert read_monitor(tmp_path / name)[METRIC_COLUMNS].isna().all().all()
    err = capfd.readouterr().err
    assert err.count(f"monitor: no Prometheus metrics at {url}; the server columns stay empty") == 1, err
    assert "Error" not in err and "Traceback" not in err
    assert page_server.gets == ["/metrics"] * 3
