"""A server's own load figures, read from its Prometheus ``/metrics`` beside the resource samples.

:class:`MetricsProbe` scrapes the URL in a background thread at the sampling
interval (its own timeout), so a slow or dead server never delays the psutil
samples; :meth:`MetricsProbe.read` returns the latest figures as the monitor
CSV's ``server_*`` metric columns, empty where the server has no such metric or
the last scrape failed (one notice, once). A URL that answers without
Prometheus metrics (404, an HTML or JSON page) or without a known server's
names is not scraped again: its columns stay empty.

Each server's metric names are one row of :data:`SERVER_METRICS`; counters and
histograms become per-interval figures from the difference between two scrapes.
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, fields
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

#: The monitor CSV's columns filled from the server's metrics.
METRIC_COLUMNS = ["server_running", "server_waiting", "server_kv_cache_pct", "server_prefix_cache_hit_pct",
                  "server_ttft_mean_ms"]


@dataclass(frozen=True)
class MetricNames:
    """One server's metric names, per figure (None: the server has no such metric)."""

    running: str  # gauge: requests in the running batch -> server_running
    waiting: str | None  # gauge: requests queued -> server_waiting
    kv_cache_usage: str | None  # gauge, 0..1 -> server_kv_cache_pct
    prefix_cache_hits: str | None  # counter (tokens) -> server_prefix_cache_hit_pct, with the queries
    prefix_cache_queries: str | None  # counter (tokens)
    ttft: str | None  # histogram, seconds -> server_ttft_mean_ms


#: One line per server (vLLM 0.32's v1 names; the basic server's /metrics).
SERVER_METRICS = {
    "vllm": MetricNames("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                        "vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:time_to_first_token_seconds"),
    "llmload": MetricNames("llmload:num_requests_running", "llmload:num_requests_waiting",
                           "llmload:kv_cache_usage_perc", None, None, "llmload:time_to_first_token_seconds"),
}
#: How long one scrape may take: a server busy with its batch answers /metrics late, not never.
SCRAPE_TIMEOUT_S = 2.0
_SUFFIXES = ("_total", "_sum", "_count", "_bucket", "_created")


@dataclass(frozen=True)
class Scrape:
    """The figures of one scrape: gauges as read, counters and histogram sums as running totals."""

    server: str
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    ttft_sum: float | None = None
    ttft_count: float | None = None


def parse_metrics(text: str) -> Scrape | None:
    """The known figures in a Prometheus exposition (summed over label sets; KV use averaged), or None."""
    wanted = {name for names in SERVER_METRICS.values() for name in _names(names)}
    lines = [line for line in text.splitlines() if _family(line) in wanted]  # skip the other metrics unparsed
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            totals.setdefault(sample.name, []).append(sample.value)
    for server, names in SERVER_METRICS.items():
        if names.running not in totals:
            continue

        def total(name: str | None, suffix: str = "") -> float | None:
            values = totals.get(name + suffix) if name else None
            return sum(values) if values else None

        usage = totals.get(names.kv_cache_usage) if names.kv_cache_usage else None
        return Scrape(server=server, running=total(names.running), waiting=total(names.waiting),
                      kv_cache_usage=sum(usage) / len(usage) if usage else None,
                      prefix_cache_hits=total(names.prefix_cache_hits, "_total"),
                      prefix_cache_queries=total(names.prefix_cache_queries, "_total"),
                      ttft_sum=total(names.ttft, "_sum"), ttft_count=total(names.ttft, "_count"))
    return None


def columns_from(scrape: Scrape, previous: Scrape | None) -> dict[str, float | None]:
    """The CSV's metric columns: gauges now, and the prefix-cache hit rate and mean TTFT since ``previous``."""

    def delta(name: str) -> float | None:
        if previous is None or getattr(scrape, name) is None:
            return None
        now, before = getattr(scrape, name), getattr(previous, name) or 0.0  # a new series starts at 0
        return now - before if now >= before else None  # below: the server restarted

    hits, queries = delta("prefix_cache_hits"), delta("prefix_cache_queries")
    ttft_sum, ttft_count = delta("ttft_sum"), delta("ttft_count")
    return {
        "server_running": scrape.running,
        "server_waiting": scrape.waiting,
        "server_kv_cache_pct": None if scrape.kv_cache_usage is None else 100.0 * scrape.kv_cache_usage,
        "server_prefix_cache_hit_pct": 100.0 * hits / queries if hits is not None and queries else None,
        "server_ttft_mean_ms": 1000.0 * ttft_sum / ttft_count if ttft_sum is not None and ttft_count else None,
    }


class MetricsProbe:
    """Scrapes ``url`` every ``interval`` s in a daemon thread; :meth:`read` never waits for the network."""

    def __init__(self, url: str, interval: float, notify: Callable[[str], None], timeout: float | None = None,
                 say_missing: bool = True):
        """``say_missing=False``: an earlier monitor of the same run already said that ``url`` has no metrics."""
        self.url = url
        self.say_missing = say_missing
        self.interval = interval
        self.timeout = timeout if timeout is not None else max(SCRAPE_TIMEOUT_S, interval)
        self.notify = notify
        self._latest: tuple[float, dict[str, float | None]] | None = None
        self._noticed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="server-metrics", daemon=True)
        self._thread.start()

    def read(self) -> dict[str, float | None]:
        """The latest scrape's columns; empty when it failed or is older than two intervals and a timeout."""
        latest = self._latest
        if latest is None or time.monotonic() - latest[0] > 2 * self.interval + self.timeout:
            return dict.fromkeys(METRIC_COLUMNS)
        return latest[1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 1)

    def _run(self) -> None:
        previous: Scrape | None = None
        start, tick = time.monotonic(), 0
        while not self._stop.is_set():
            try:
                scrape = self._scrape()
            except NoMetrics as exc:  # the answer will not change: say so (once a run) and stop scraping
                self._latest = None
                if self.say_missing:
                    self._notice(str(exc))
                return
            except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timed out, HTTP 5xx,
                self._latest, previous = None, None  # cut short, malformed: empty cells while it lasts
                self._notice(f"no server metrics from {self.url} ({_reason(exc, self.timeout)}); the server "
                             "columns are left empty while it fails")
            else:
                self._latest = (time.monotonic(), columns_from(scrape, previous))
                previous = scrape
            tick = max(tick + 1, int((time.monotonic() - start) / self.interval) + 1)  # skip missed ticks
            self._stop.wait(max(0.0, start + tick * self.interval - time.monotonic()))

    def _scrape(self) -> Scrape:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout) as response:
                content_type = response.headers.get_content_type()
                text = response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                raise
            raise NoMetrics(f"no Prometheus metrics at {self.url}; the server columns stay empty "
                            f"(it answered HTTP {exc.code})") from None
        scrape = parse_metrics(text)
        if scrape is not None:
            return scrape
        if not is_prometheus_text(text, content_type):
            raise NoMetrics(f"no Prometheus metrics at {self.url}; the server columns stay empty "
                            f"(it answered {content_type})")
        raise NoMetrics(f"no vLLM or basic-server metric names at {self.url}; the server columns stay empty "
                        "(add the server's names to SERVER_METRICS in monitors/server_metrics.py)")

    def _notice(self, message: str) -> None:
        if not self._noticed:
            self._noticed = True
            self.notify(message)


class NoMetrics(Exception):
    """The URL answered, with no metrics the probe can read (the message says what it answered)."""


def is_prometheus_text(text: str, content_type: str) -> bool:
    """Whether ``text`` is a Prometheus (or OpenMetrics) exposition with at least one metric."""
    if content_type not in ("text/plain", "application/openmetrics-text"):
        return False
    try:
        return any(True for _ in text_string_to_metric_families(text))
    except ValueError:
        return False


def _reason(exc: BaseException, timeout: float) -> str:
    """Why a scrape failed, in words (never the exception's class name)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else exc
    if isinstance(exc, http.client.IncompleteRead):
        return "the answer was cut short"
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s"
    return getattr(exc, "strerror", None) or str(exc) or "the connection failed"


def _names(names: MetricNames) -> list[str]:
    return [value for value in (getattr(names, f.name) for f in fields(names)) if value]


def _family(line: str) -> str | None:
    """The metric family a line of the exposition belongs to (``# HELP``/``# TYPE`` lines included)."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        if len(parts) < 3 or parts[1] not in ("HELP", "TYPE"):
            return None
        name = parts[2]
    else:
        words = line.split("{", 1)[0].split(None, 1)
        name = words[0] if words else ""  # a line starting with "{" (a JSON page) names no metric
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
