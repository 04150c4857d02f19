"""Results into Locust's stats: the request row and the ``METRIC`` rows, logged where the result is counted.

The request row (``POST chat /v1/chat/completions``) gets the true E2E as its
response time and the output tokens as its length; each catalogue metric
marked ``locust_row`` gets a ``METRIC`` row (``chat TTFT``, ``chat TPOT``,
``chat dispatch lag``, in ms), plus ``chat SLO ...`` whose failures are the
requests that missed it. A cancelled request (``--cancel-rate``) is neither a
success nor a failure of the request row: it goes to its own ``chat cancelled``
row (its time to the cancel, its tokens received), so it leaves the latency
rows and never sets the exit code. ``METRIC`` rows are logged straight into their
``StatsEntry``, so the Aggregated row counts real requests only. On a worker
these rows travel to the master in Locust's own stats reports.
"""

from __future__ import annotations

from locust.stats import StatsError

from llmload.core.metrics import METRICS, RequestMetrics, RequestResult

METRIC_TYPE = "METRIC"
SLO_MISSED = "missed the SLO"
CANCELLED = "cancelled"


class RequestFailure(Exception):
    """A failed request as Locust records it; ``repr`` is the bare message, as Locust prints errors with repr."""

    def __repr__(self) -> str:
        return str(self.args[0]) if self.args else "request failed"


def request_row_name(task: str, path: str) -> str:
    """Name of the request row of ``task`` (request type ``POST``)."""
    return f"{task} {path}"


def metric_row_name(task: str, title: str) -> str:
    """Name of a ``METRIC`` row: ``chat TTFT``."""
    return f"{task} {title}"


class LocustRows:
    """Logs one result into an environment's Locust stats (a :class:`~llmload.loadgen.sink.ResultSink`'s ``rows``)."""

    def __init__(self, environment, settings):
        self.environment, self.settings = environment, settings

    def __call__(self, result: RequestResult, metrics: RequestMetrics) -> None:
        stats = self.environment.stats
        if result.cancelled:
            stats.get(metric_row_name(result.task, CANCELLED), METRIC_TYPE).log(
                result.end_offset * 1000.0, metrics.output_tokens)
            return
        self.environment.events.request.fire(
            request_type="POST", name=request_row_name(result.task, self.settings.params.path),
            response_time=(metrics.e2e if result.success else result.end_offset) * 1000.0,
            response_length=metrics.output_tokens, exception=None if result.success else RequestFailure(result.error),
            context={}, start_time=result.start_time, url="", response=None)
        if not result.success:
            return
        for metric in METRICS:
            if metric.locust_row:
                value = metric.value(metrics)
                if value is not None:
                    stats.get(metric_row_name(result.task, metric.title), METRIC_TYPE).log(
                        value * metric.scale, metrics.output_tokens)
        if result.slo_ok is not None:
            entry = stats.get(metric_row_name(result.task, f"SLO {self.settings.slo.describe()}"), METRIC_TYPE)
            entry.log(metrics.e2e * 1000.0, metrics.output_tokens)
            if not result.slo_ok:
                # a failure of the row, and one line of Locust's error table (which sets the exit code),
                # not of the Aggregated row, which counts real requests only
                entry.log_error(None)
                key = StatsError.create_key(METRIC_TYPE, entry.name, SLO_MISSED)
                stats.errors.setdefault(key, StatsError(METRIC_TYPE, entry.name, SLO_MISSED)).occurred()
