"""``--prometheus-port``: the live figures at ``/metrics``, read from the live board at each scrape.

The master of a distributed run (its board merges every worker's report) or a
standalone run serves them through prometheus_client, labelled by ``run`` (the
run's id, also in ``<prefix>_summary.json``) and ``task``:

* counters: ``llmload_requests_total`` (warm-up excluded, failures included),
  ``llmload_failures_total``, ``llmload_cancelled_total`` (with ``--cancel-rate``),
  ``llmload_output_tokens_total``, ``llmload_slo_met_total``;
* histograms (fixed edges, :mod:`~llmload.loadgen.histograms`):
  ``llmload_{ttft,tpot,itl,e2e,dispatch_lag}_seconds`` of successful requests;
* gauges, run so far: ``llmload_slo_attainment_ratio``, ``llmload_goodput_requests_per_second``,
  ``llmload_users``; per process that sends requests (``worker``: its id, or
  ``local``): ``llmload_client_error_bound_seconds``, ``llmload_client_cpu_ratio``,
  ``llmload_client_loop_delay_seconds`` (p50).

The names and their meaning: docs/prometheus.md; the Grafana dashboard that
charts them: deploy/grafana/llmload.json.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from llmload.core.metrics import METRIC_BY_NAME
from llmload.loadgen.histograms import EDGES
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.options import SettingsError, metrics_port_error

PREFIX = "llmload_"
LOCAL = "local"  # the worker label of a standalone run's own process


class Scrape(NamedTuple):
    """What a scrape reads: the run's id, its live board, the users running."""

    run: str
    board: LiveBoard
    users: int


def histogram_name(metric: str) -> str:
    return f"{PREFIX}{metric}_seconds"


class LiveCollector:
    """A prometheus_client collector over the live board that ``source()`` returns at each scrape."""

    def __init__(self, source: Callable[[], Scrape]):
        self.source = source

    def collect(self):
        run, board, users = self.source()
        task_labels = ["run", "task"]
        counters = {key: CounterMetricFamily(PREFIX + key, text, labels=task_labels) for key, text in (
            ("requests", "requests measured (warm-up excluded), failures included"),
            ("failures", "requests that failed"),
            ("cancelled", "requests the client cancelled on purpose (--cancel-rate)"),
            ("output_tokens", "output tokens of successful requests"),
            ("slo_met", "requests that met every --slo target"))}
        attainment = GaugeMetricFamily(PREFIX + "slo_attainment_ratio", "requests meeting every --slo target / "
                                       "requests (failures miss), run so far", labels=task_labels)
        goodput = GaugeMetricFamily(PREFIX + "goodput_requests_per_second", "requests meeting every --slo target / "
                                    "wall time, run so far", labels=task_labels)
        histograms = {name: HistogramMetricFamily(histogram_name(name), METRIC_BY_NAME[name].formula,
                                                  labels=task_labels) for name in EDGES}
        for task, stats in sorted(board.tasks.items()):
            labels = [run, task]
            counters["requests"].add_metric(labels, stats.requests)
            counters["failures"].add_metric(labels, stats.failures)
            counters["output_tokens"].add_metric(labels, stats.tokens)
            if stats.cancelled is not None:
                counters["cancelled"].add_metric(labels, stats.cancelled)
            if stats.slo_met is not None:
                summary = stats.summary()
                counters["slo_met"].add_metric(labels, stats.slo_met)
                attainment.add_metric(labels, summary.slo_attainment / 100.0)
                goodput.add_metric(labels, summary.goodput)
            for name, histogram in getattr(board.histograms.get(task), "metrics", {}).items():
                if histogram.count:
                    histograms[name].add_metric(labels, histogram.cumulative(), histogram.total)
        yield from counters.values()
        yield from (attainment, goodput)
        yield from histograms.values()
        yield from self._client(run, board)
        users_gauge = GaugeMetricFamily(PREFIX + "users", "users running", labels=["run"])
        users_gauge.add_metric([run], users)
        yield users_gauge

    @staticmethod
    def _client(run: str, board: LiveBoard):
        labels = ["run", "worker"]
        bound = GaugeMetricFamily(PREFIX + "client_error_bound_seconds", "how late this process may have stamped a "
                                  "token (p99 of its loop probe's delays; the run's bound is the largest)",
                                  labels=labels)
        cpu = GaugeMetricFamily(PREFIX + "client_cpu_ratio", "this process's CPU seconds / wall seconds "
                                "(1 = one core busy)", labels=labels)
        delay = GaugeMetricFamily(PREFIX + "client_loop_delay_seconds", "median delay of this process's loop "
                                  "probe", labels=labels)
        for node, reading in sorted(board.clock.items()):
            labels = [run, node or LOCAL]
            if reading.samples:
                bound.add_metric(labels, reading.bound)
                delay.add_metric(labels, reading.quantile(0.5))
            if reading.cpu_share is not None:
                cpu.add_metric(labels, reading.cpu_share)
        yield from (bound, cpu, delay)


class Exporter:
    """The ``/metrics`` server of one process (prometheus_client's, in a thread: a greenlet under Locust)."""

    def __init__(self, source: Callable[[], Scrape]):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(LiveCollector(source))
        self._server = None

    def start(self, host: str, port: int) -> None:
        """Serve ``/metrics`` on ``host:port``; :class:`SettingsError` (one line) when it cannot bind."""
        try:
            self._server, _thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise SettingsError(metrics_port_error(host, port, exc)) from None

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
