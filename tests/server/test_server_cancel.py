"""Cancelled requests on the basic server (mock engine): the client library closes each stream at its cancel point,
the engine stops (``/metrics``: running drops to 0, ``generation_tokens_total`` stops growing) and the server
counts each one as ``request_success_total{finished_reason="abort"}``."""

from __future__ import annotations

import time

import gevent
import httpx
import pytest
from geventhttpclient.client import HTTPClientPool
from prometheus_client.parser import text_string_to_metric_families

from llmload.core.cancel import CancelPoint
from llmload.core.client import LLMClient
from llmload.core.records import PromptRecord
from llmload.core.transport import HTTPTransport
from llmload.core.apis import GenerationParams

pytestmark = pytest.mark.integration

STREAMS = 3
ITL_MS = 20.0
RECORD = PromptRecord(id="p", task="chat", source="test", prompt="hi", messages=({"role": "user", "content": "hi"},),
                      max_tokens=4000, input_tokens=1)  # 80 s of tokens unless cancelled


def samples(url: str) -> dict[tuple[str, str], float]:
    """``(name, finished_reason)`` -> value of the server's ``/metrics`` (summed over the other labels)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, s.labels.get("finished_reason", ""))
            out[key] = out.get(key, 0.0) + s.value
    return out


def running(url: str) -> float:
    return samples(url)[("llmload:num_requests_running", "")]


def tokens(url: str) -> float:
    return samples(url)[("llmload:generation_tokens_total", "")]


def test_cancelled_streams_stop_the_engine(server_factory):
    url = server_factory("mock", "--mock-ttft-ms", "0", "--mock-itl-ms", str(ITL_MS), "--max-model-len", "8192",
                         "--log-level", "warning")
    pool = HTTPClientPool(network_timeout=30, connection_timeout=30, concurrency=STREAMS)
    client = LLMClient(HTTPTransport(url, pool), GenerationParams(api="chat", mode="stream", max_tokens=4000),
                       "chat", timeout=30)
    points = [CancelPoint("send", 1.5), CancelPoint("ttft", 1.0), CancelPoint("tokens", 40)]
    streams = [gevent.spawn(client.generate, RECORD, "mock", None, point) for point in points]
    gevent.sleep(0.5)
    assert running(url) == STREAMS  # all three generating (the blocking scrape pauses them, no matter)
    results = [g.get(timeout=30) for g in streams]
    assert all(r.cancelled and not r.success and r.error == "" for r in results), [r.error for r in results]
    assert results[2].output_tokens == 40
    deadline = time.monotonic() + 5
    while running(url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running(url) == 0
    produced = tokens(url)
    received = sum(r.output_tokens for r in results)
    # the engine stopped within a step or two of each cancel, far from the 3 x 4000 tokens asked for
    assert received <= produced <= received + STREAMS * 10, (received, produced)
    time.sleep(0.5)  # 25 more tokens per stream had they gone on
    after = samples(url)
    assert after[("llmload:generation_tokens_total", "")] == produced
    assert after[("llmload:request_success_total", "abort")] == STREAMS
    assert after[("llmload:request_success_total", "length")] == 0
