"""``GET /metrics``: the basic server's Prometheus metrics, named like vLLM's under the ``llmload:`` prefix.

``llmload:num_requests_running``, ``llmload:num_requests_waiting`` and
``llmload:kv_cache_usage_perc`` (0..1) are read from the engine at each scrape
(:meth:`server.engines.base.Engine.load`); ``llmload:time_to_first_token_seconds``
is a histogram with vLLM's buckets, from the request reaching the endpoint to
its first token. ``llmload:generation_tokens_total`` counts the tokens the app
took from the engine as they came, and ``llmload:request_success_total`` the
generations that ended, labelled ``finished_reason`` (``stop``, ``length``, or
``abort`` for a client that went away, ``error``: unlike vLLM, whose aborted requests never
reach its counters, these count). Each app has its own registry, so several apps in one process
do not clash.
"""

from __future__ import annotations

import time
from typing import AsyncIterator, Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from server.engines.base import Engine, GenerationDelta

PREFIX = "llmload:"
#: vLLM's ``vllm:time_to_first_token_seconds`` buckets (vllm/v1/metrics/buckets.py), so histograms compare.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class _EngineCollector:
    """The engine's gauges, read when scraped (nothing to update on the request path)."""

    def __init__(self, get_engine: Callable[[], Engine | None]):
        self.get_engine = get_engine

    def collect(self) -> Iterator[Metric]:
        engine = self.get_engine()
        if engine is None:  # not started yet
            return
        load = engine.load()
        labels = [engine.served_model_name]
        gauges = [("num_requests_running", "Number of requests generating now.", load.running),
                  ("num_requests_waiting", "Number of requests waiting to be processed.", load.waiting)]
        if load.kv_cache_usage is not None:
            gauges.append(("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (naive: the running "
                           "request's positions over max_model_len; batched: positions held over max_num_seqs x "
                           "max_model_len).", load.kv_cache_usage))
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(PREFIX + name, documentation, labels=["model_name"])
            gauge.add_metric(labels, value)
            yield gauge


class ServerMetrics:
    """One app's registry: the engine's gauges and the time-to-first-token histogram."""

    def __init__(self, get_engine: Callable[[], Engine | None]):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_EngineCollector(get_engine))
        self.ttft = Histogram(PREFIX + "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labelnames=["model_name"], buckets=TTFT_BUCKETS, registry=self.registry)
        self.tokens = Counter(PREFIX + "generation_tokens", "Number of generation tokens processed (a cancelled "
                              "request's up to its cancel).", labelnames=["model_name"], registry=self.registry)
        self.finished = Counter(PREFIX + "request_success", "Count of finished requests by finished_reason (abort: "
                                "its client went away before the end).", labelnames=["model_name", "finished_reason"],
                                registry=self.registry)

    def started(self, engine: Engine) -> None:
        """Create the engine's series, so that the histogram reads 0 before the first request (as vLLM's)."""
        self.ttft.labels(engine.served_model_name)
        self.tokens.labels(engine.served_model_name)
        for reason in ("stop", "length", "abort", "error"):
            self.finished.labels(engine.served_model_name, reason)

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    async def timed(self, generation: AsyncIterator[GenerationDelta], model_name: str,
                    started: float) -> AsyncIterator[GenerationDelta]:
        """``generation``, observing the time from ``started`` (``time.monotonic()``) to its first delta, its
        tokens as they come, and how it ended."""
        tokens, reason = self.tokens.labels(model_name), "abort"
        try:
            first, counted = True, 0
            async for delta in generation:
                if first:
                    self.ttft.labels(model_name).observe(time.monotonic() - started)
                    first = False
                tokens.inc(max(delta.completion_tokens - counted, 0))
                counted = max(counted, delta.completion_tokens)
                if delta.finish_reason is not None:
                    reason = delta.finish_reason
                yield delta
        except Exception:
            reason = "error"
            raise
        finally:
            self.finished.labels(model_name, reason).inc()
            await generation.aclose()  # closing this closes the engine's stream, which cancels its work
