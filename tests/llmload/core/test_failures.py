"""Failures told honestly, in the core: each failure's class, the retry policy, the client's retries against a
scripted server (a thread), and the figures summarize and LiveStats make of failures and retries."""

from __future__ import annotations

import email.utils
import json

import pytest
from geventhttpclient.client import HTTPClientPool

from fault_server import start_in_thread
from llmload.core.apis import GenerationParams
from llmload.core.client import LLMClient
from llmload.core.metrics import (CONNECTION, FAILURE_CLASSES, SLO, TIMED_OUT, UNREACHABLE, LiveStats, RequestResult,
                                  failure_class, summarize)
from llmload.core.records import PromptRecord
from llmload.core.retry import BACKOFF_BASE_S, RetryPolicy, parse_retry_after
from llmload.core.transport import HTTPTransport
from llmload.core.wire import SERVER_REPORTED

pytestmark = pytest.mark.unit

RECORD = PromptRecord(id="p1", task="chat", source="test", prompt="Hi", messages=({"role": "user", "content": "Hi"},),
                      max_tokens=8, input_tokens=1)


def result(success=True, status=200, flags=(), start=100.0, end=0.5, error="", **kw) -> RequestResult:
    offsets = [end / 2, end] if success else []
    return RequestResult("id", "qa", "chat", "stream", start, end, offsets, output_tokens=2 if success else None,
                         success=success, status_code=status, error=error or ("" if success else "failed"),
                         flags=list(flags), **kw)


# --------------------------------------------------------------------------- classes


@pytest.mark.parametrize("status, flags, expected", [
    (429, (), "rejected"),
    (503, (), "server_error"),
    (500, (), "server_error"),
    (200, (SERVER_REPORTED,), "server_error"),  # an error event inside a 200 stream: the server's own error
    (404, (), "client_error"),
    (400, (), "client_error"),
    (0, (UNREACHABLE,), "connection"),
    (200, (CONNECTION,), "connection"),  # dropped mid-stream
    (0, (), "connection"),  # nothing sent (no model to ask for)
    (0, (TIMED_OUT,), "timeout"),
    (200, (TIMED_OUT,), "timeout"),  # a stream that stalled
    (200, (), "protocol"),  # malformed or truncated stream
])
def test_each_failure_has_one_class_from_its_status_and_flags(status, flags, expected):
    assert failure_class(result(False, status, flags)) == expected
    assert expected in FAILURE_CLASSES


def test_successes_and_cancels_have_no_failure_class():
    assert failure_class(result()) is None
    assert failure_class(result(False, 200, cancelled=True)) is None


# --------------------------------------------------------------------------- the retry policy


def test_retry_after_in_seconds_an_http_date_or_garbage():
    assert parse_retry_after("1") == 1.0 and parse_retry_after(" 30 ") == 30.0
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)  # "Fri, 15 Jan 2027 08:00:12 GMT"
    assert parse_retry_after(date, now) == pytest.approx(12.0)
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now) == 0.0  # past: at once
    for garbage in ("", "soon", "-5", "1.5", "Mon, 99 Foo 2027", None):
        assert parse_retry_after(garbage, now) is None, garbage


def test_backoff_doubles_with_jitter_and_is_capped():
    policy = RetryPolicy(retries=10, max_wait=3.0)
    for retry in range(10):
        ceiling = min(3.0, BACKOFF_BASE_S * 2 ** retry)
        low, high = policy.backoff(retry, draw=0.0), policy.backoff(retry, draw=0.999999)
        assert low == pytest.approx(ceiling / 2) and high == pytest.approx(ceiling, rel=1e-5)
        assert all(ceiling / 2 <= policy.backoff(retry) <= ceiling for _ in range(50))
    assert policy.backoff(9, draw=0.999999) <= 3.0  # 0.5 * 2**9 = 256 s, capped


def test_what_is_retried_and_what_is_not():
    policy = RetryPolicy(retries=2, max_wait=5.0)
    assert policy.wait(429, "1", 0) == (1.0, "") and policy.wait(503, "2", 1) == (2.0, "")
    wait, _ = policy.wait(503, "", 0)
    assert BACKOFF_BASE_S / 2 <= wait <= BACKOFF_BASE_S  # no Retry-After: the backoff
    assert policy.wait(429, "1", 2) == (None, "")  # no retry left
    for status in (200, 500, 502, 404, 0):
        assert policy.wait(status, "1", 0) == (None, "")
    assert policy.wait(429, "60", 0) == (None, "not retried: Retry-After 60 s > --retry-max-wait 5 s")


# --------------------------------------------------------------------------- the client's retries


def make_client(url: str, retry: RetryPolicy | None = None, timeout: float = 5.0) -> LLMClient:
    pool = HTTPClientPool(network_timeout=timeout, connection_timeout=timeout, concurrency=1)
    return LLMClient(HTTPTransport(url, pool), GenerationParams(api="chat", mode="stream", max_tokens=8), "chat",
                     timeout=timeout, retry=retry)


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread()
    yield srv
    srv.shutdown()


def test_a_429_without_retry_is_a_rejected_failure(server):
    r = make_client(server.url).generate(RECORD, "reject_once")
    assert not r.success and r.status_code == 429 and failure_class(r) == "rejected"
    assert r.error == "HTTP 429: too many requests: try again in 1 s" and r.attempts == 1 and r.retries == []


@pytest.mark.serial  # wall-clock bounds
def test_a_retried_429_waits_its_retry_after_and_counts_from_the_first_send(server):
    r = make_client(server.url, RetryPolicy(2, 10.0)).generate(RECORD, "reject_once")
    assert r.success and r.status_code == 200 and r.output_tokens == 3, r.error
    assert r.attempts == 2 and r.retry_wait == 1.0
    first = r.retries[0]
    assert first["status"] == 429 and first["error"].startswith("HTTP 429") and first["end"] < 0.5
    assert 1.0 <= r.token_offsets[0] < 2.0 and r.end_offset >= 1.0  # what the user waited: the wait included
    assert json.loads(r.to_json())["retries"] == r.retries  # the raw log keeps every attempt


def test_a_503_without_retry_after_backs_off():
    own = start_in_thread()  # its own counter: the first request is the 503
    try:
        r = make_client(own.url, RetryPolicy(1, 10.0)).generate(RECORD, "unavailable_third")
    finally:
        own.shutdown()
    assert r.success and r.attempts == 2 and r.retries[0]["status"] == 503
    assert BACKOFF_BASE_S / 2 <= r.retry_wait <= BACKOFF_BASE_S


@pytest.mark.serial  # wall-clock bounds
def test_a_retry_after_beyond_the_cap_or_the_timeout_is_not_waited_for(server):
    r = make_client(server.url, RetryPolicy(2, max_wait=0.5)).generate(RECORD, "reject_once")
    assert not r.success and r.attempts == 1 and failure_class(r) == "rejected"
    assert r.error.endswith("(not retried: Retry-After 1 s > --retry-max-wait 0.5 s)")
    r = make_client(server.url, RetryPolicy(2, 10.0), timeout=0.8).generate(RECORD, "reject_once")
    assert not r.success and r.attempts == 1 and r.end_offset < 0.8
    assert r.error.endswith("(not retried: its wait (1.0 s) would pass --timeout)")


def test_an_old_raw_log_line_without_retries_loads():
    line = json.loads(result().to_json())
    del line["retries"]
    old = RequestResult.from_dict(line)
    assert old.retries == [] and old.attempts == 1 and old.retry_wait == 0.0


# --------------------------------------------------------------------------- the figures


def mixed() -> list[RequestResult]:
    """6 successes (E2E 0.5 s), 2 rejected fast (10 ms), 1 server error (50 ms); one success after a retry."""
    ok = [result(start=100.0 + i, end=0.5) for i in range(6)]
    ok[0].retries = [{"status": 429, "error": "HTTP 429: x", "end": 0.01, "wait": 1.0}]
    bad = [result(False, 429, start=101.5, end=0.01), result(False, 429, start=102.5, end=0.01),
           result(False, 503, start=103.5, end=0.05)]
    return ok + bad


def test_summarize_counts_failures_by_class_and_keeps_their_latencies_apart():
    s = summarize(mixed())
    flat = s.flat()
    assert (s.requests, s.failures) == (9, 3) and flat["failure_pct"] == pytest.approx(100 * 3 / 9)
    assert (flat["failed_rejected"], flat["failed_server_error"], flat["failed_timeout"]) == (2, 1, 0)
    assert flat["e2e_p50"] == flat["e2e_p99"] == pytest.approx(0.5)  # successes only
    assert flat["failure_latency_p50"] == pytest.approx(0.01) and flat["failure_latency_max"] == pytest.approx(0.05)
    assert (flat["retried"], flat["attempts"], flat["retry_ok"], flat["retry_wait_s"]) == (1, 10, 1, 1.0)
    assert flat["request_throughput"] == pytest.approx(6 / 5.5)  # successes over their wall time
    assert "3 failed [2 rejected (429), 1 server errors (5xx)], 1 retried (10 attempts" in s.line()


def test_without_retries_the_retry_figures_are_empty_and_without_an_slo_there_is_no_goodput():
    s = summarize([result(), result(False, 500)])
    assert (s.retried, s.attempts, s.retry_ok, s.retry_wait_s, s.goodput) == (None, None, None, None, None)
    assert "retried" not in s.line()


def test_failures_miss_the_slo_and_the_goodput():
    slo = SLO(e2e=1.0)
    results = mixed()
    for r in results:
        r.slo_ok = slo.met(r)
    s = summarize(results)
    assert s.slo_attainment == pytest.approx(100 * 6 / 9) and s.goodput == pytest.approx(6 / 5.5)
    rejected = [result(False, 429, start=100.0 + i) for i in range(4)]
    for r in rejected:
        r.slo_ok = slo.met(r)
    s = summarize(rejected)
    assert (s.slo_attainment, s.goodput, s.request_throughput, s.figure("failed_rejected")) == (0.0, 0.0, 0.0, 4)


def test_live_stats_count_the_same_and_carry_them_between_processes():
    results = mixed()
    exact = summarize(results)
    halves = [LiveStats(), LiveStats()]
    for i, r in enumerate(results):
        halves[i % 2].add(r)
    merged = LiveStats.from_wire(halves[0].to_wire())
    merged.merge(LiveStats.from_wire(halves[1].to_wire()))
    live = merged.summary()
    for column in ["failures", "failure_pct", "retried", "attempts", "retry_ok", "retry_wait_s",
                   *(f"failed_{name}" for name in FAILURE_CLASSES)]:
        assert live.flat()[column] == pytest.approx(exact.flat()[column]), column
    assert live.get("failure_latency", "max") == pytest.approx(0.05)
    assert live.get("e2e", "p50") == pytest.approx(0.5, rel=0.02)
    old_wire = halves[0].to_wire()
    del old_wire["tally"]  # a worker of a version before the tally
    assert LiveStats.from_wire(old_wire).summary().figure("failed_rejected") == 0
