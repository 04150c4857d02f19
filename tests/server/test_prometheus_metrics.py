"""``GET /metrics``: Prometheus text with the engine's running/waiting/KV gauges and a TTFT histogram."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.app import create_app
from server.engines.mock import MockEngine
from server.settings import ServerSettings
from server_client import post, sample_while, scrape, stream

TTFT_MS = 2000.0
IN_FLIGHT = 5


@pytest.fixture
def slow_mock(server_factory) -> str:
    """A mock server whose first token comes after 2 s, behind an API key."""
    return server_factory("mock", "--mock-ttft-ms", str(TTFT_MS), "--mock-itl-ms", "10", "--api-key", "k",
                          "--log-level", "warning")


@pytest.mark.integration
def test_running_gauge_reads_the_requests_in_flight(slow_mock):
    auth = {"Authorization": "Bearer k"}
    idle = scrape(slow_mock)  # no API key needed, as for /health
    assert idle["llmload:num_requests_running"] == 0 and idle["llmload:num_requests_waiting"] == 0
    assert "llmload:kv_cache_usage_perc" not in idle  # the mock has no KV cache
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        calls = [pool.submit(stream, slow_mock, "/v1/completions", {"prompt": "hi", "max_tokens": 3}, auth, 30)
                 for _ in range(IN_FLIGHT)]
        seen = sample_while(slow_mock, lambda: not all(c.done() for c in calls), 30)
        results = [c.result() for c in calls]
    running = [s["llmload:num_requests_running"] for s in seen]
    assert max(running) == IN_FLIGHT, running
    assert all(r.text() == " the quick brown" for r in results)
    after = scrape(slow_mock)
    assert after["llmload:num_requests_running"] == 0
    # One time to first token per request, each about the mock's 2 s.
    assert after["llmload:time_to_first_token_seconds_count"] == IN_FLIGHT
    mean = after["llmload:time_to_first_token_seconds_sum"] / IN_FLIGHT
    assert TTFT_MS / 1000 * 0.95 <= mean <= TTFT_MS / 1000 + 2.0, mean


@pytest.mark.integration
def test_waiting_gauge_on_the_naive_engine(real_server):
    """Three requests at once on the one-at-a-time engine: some wait, one runs, its KV use is reported."""
    body = {"messages": [{"role": "user", "content": "Count from one to twenty."}], "max_tokens": 24,
            "ignore_eos": True, "temperature": 0}
    with ThreadPoolExecutor(3) as pool:
        calls = [pool.submit(post, real_server, "/v1/chat/completions", body, None, 120) for _ in range(3)]
        seen = sample_while(real_server, lambda: not all(c.done() for c in calls), 120)
        assert all(c.result().status_code == 200 for c in calls)
    waiting = [s["llmload:num_requests_waiting"] for s in seen]
    running = [s["llmload:num_requests_running"] for s in seen]
    usage = [s["llmload:kv_cache_usage_perc"] for s in seen]
    assert max(waiting) > 0, waiting
    assert set(running) <= {0, 1} and max(running) == 1, running
    assert 0 < max(usage) <= 1, usage
    after = scrape(real_server)
    assert (after["llmload:num_requests_running"], after["llmload:num_requests_waiting"]) == (0, 0)
    assert after["llmload:kv_cache_usage_perc"] == 0


@pytest.mark.unit
def test_each_app_has_its_own_registry():
    """Two apps in one process (a shared registry would refuse the second app's histogram)."""
    for name in ("a", "b"):
        engine = MockEngine("mock", name)
        app = create_app(ServerSettings(engine="mock"), engine=engine, engine_started=True)
        app.state.engine = engine  # what the lifespan does at start-up
        text = app.state.metrics.render()[0].decode()
        labels = {s.labels.get("model_name") for f in text_string_to_metric_families(text) for s in f.samples}
        assert labels == {name}, text
