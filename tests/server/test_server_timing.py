"""The basic server's own per-request timing (vLLM's ``metrics`` object) and its request id (``X-Request-Id``).

Three levels: the arithmetic of :meth:`RequestTiming.metrics_ms` against
vLLM's formulas; the mock engine with K slots and more than K concurrent
requests, whose schedule is known (queue time: the wait for a slot; time to
first token: ``ttft_ms``; generation time: ``(max_tokens - 1) x itl_ms``), in
process and over HTTP (``serial``: bounds of a few ms); and the real model on
the naive and batched engines: ``metrics`` in every place vLLM puts it, each
figure finite and non-negative, their sum within the client's end-to-end time.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid

import httpx
import pytest
from server_client import METRICS_FIELDS, SLOTTED_MOCK, post, responses_stream, stream

from server.engines.base import PreparedPrompt, RequestTiming, SamplingParams
from server.engines.mock import MockEngine

#: How far a mock's figure may be from its schedule (ms): the event loop's lateness on a shared machine.
SCHEDULE_TOLERANCE_MS = 5.0
#: Over HTTP, how far apart concurrent requests sent together may reach the engine (ms): the server parses them
#: in turn (and sends a stream's headers first); a later arrival waits that much less for its slot.
ARRIVAL_WINDOW_MS = 15.0
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses"}
ID_PREFIXES = {"chat": "chatcmpl-", "completions": "cmpl-", "responses": "resp_"}


def request_body(api: str, tokens: int) -> dict:
    """A greedy request of exactly ``tokens`` tokens on ``api``."""
    common = {"temperature": 0, "ignore_eos": True}
    if api == "completions":
        return {"prompt": "The three primary colours are", "max_tokens": tokens, **common}
    if api == "chat":
        return {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": tokens, **common}
    return {"input": "Name a colour.", "max_output_tokens": tokens, **common}


def ask(base_url: str, api: str, body: dict, streamed: bool, headers: dict | None = None) -> tuple[dict, float]:
    """Send one request; return ``(its id, usage, metrics and response headers, the client's E2E in ms)``."""
    started = time.monotonic()
    if not streamed:
        resp = post(base_url, PATHS[api], body, headers)
        e2e = (time.monotonic() - started) * 1000
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        return {"id": answer["id"], "usage": answer["usage"], "metrics": answer.get("metrics"),
                "headers": resp.headers}, e2e
    if api == "responses":
        events, _ = responses_stream(base_url, body, headers)
        e2e = (time.monotonic() - started) * 1000
        final = events[-1]["response"]
        assert events[-1]["type"] in ("response.completed", "response.incomplete")
        assert all("metrics" not in e.get("response", {}) for e in events[:-1]), "metrics before the end"
        return {"id": final["id"], "usage": final["usage"], "metrics": final.get("metrics"), "headers": None}, e2e
    result = stream(base_url, PATHS[api], {**body, "stream_options": {"include_usage": True}}, headers)
    e2e = (time.monotonic() - started) * 1000
    assert all("metrics" not in chunk for chunk in result.chunks[:-1]), "metrics before the final usage chunk"
    return {"id": result.chunks[0]["id"], "usage": result.usage(), "metrics": result.metrics(),
            "headers": result.headers}, e2e


def completion_tokens(usage: dict) -> int:
    return usage["completion_tokens"] if "completion_tokens" in usage else usage["output_tokens"]


# --------------------------------------------------------------------------- the arithmetic


@pytest.mark.unit
def test_metrics_follow_vllms_formulas():
    """vLLM's build_per_request_timing_metrics: ttft = first - scheduled, generation = last - first, queue =
    scheduled - queued, mean ITL = generation / (tokens - 1), tokens/s = tokens / (last - scheduled)."""
    timing = RequestTiming(received=10.0, queued=10.002, scheduled=10.5, first_token=10.75, last_token=11.5)
    metrics = timing.metrics_ms(tokens=4)
    assert list(metrics) == METRICS_FIELDS
    expected = {"time_to_first_token_ms": 250.0, "generation_time_ms": 750.0, "queue_time_ms": 498.0,
                "mean_itl_ms": 250.0, "tokens_per_second": 4.0, "frontend_time_ms": 2.0}
    assert metrics == pytest.approx(expected, abs=1e-6)


@pytest.mark.unit
def test_metrics_leave_out_what_was_not_reached():
    one = RequestTiming(received=1.0, queued=1.0, scheduled=1.0, first_token=1.2, last_token=1.2).metrics_ms(1)
    assert one["mean_itl_ms"] is None and one["generation_time_ms"] == 0.0  # one token: no inter-token latency
    assert one["tokens_per_second"] == pytest.approx(5.0)
    waiting = RequestTiming(received=1.0, queued=1.001).metrics_ms(0)  # never scheduled
    assert waiting == {**dict.fromkeys(METRICS_FIELDS), "frontend_time_ms": pytest.approx(1.0)}
    instant = RequestTiming(queued=1.0, scheduled=1.0, first_token=1.0, last_token=1.0).metrics_ms(1)
    assert instant["tokens_per_second"] is None  # no time between scheduling and the last token, as in vLLM
    assert RequestTiming().metrics_ms(5) == dict.fromkeys(METRICS_FIELDS)


# --------------------------------------------------------------------------- the mock's known schedule

SLOTS, TTFT_MS, ITL_MS = SLOTTED_MOCK  # the slotted_mock server's schedule
TOKENS, REQUESTS = 5, 6
SERVICE_MS = TTFT_MS + (TOKENS - 1) * ITL_MS  # a slot's hold: 100 ms


def assert_on_schedule(metrics: list[dict], spread_ms: float = 0.0) -> None:
    """Each request: TTFT and generation time on the schedule; sorted queue times in waves of SLOTS requests,
    wave w waiting w x SERVICE_MS less its arrival's lag behind the first of its slot (at most ``spread_ms``)."""
    tol = SCHEDULE_TOLERANCE_MS
    for m in metrics:
        assert m["time_to_first_token_ms"] == pytest.approx(TTFT_MS, abs=tol), m
        assert m["generation_time_ms"] == pytest.approx((TOKENS - 1) * ITL_MS, abs=tol), m
        assert m["mean_itl_ms"] == pytest.approx(ITL_MS, abs=tol / (TOKENS - 1)), m
    queues = sorted(m["queue_time_ms"] for m in metrics)
    for i, queue in enumerate(queues):
        wave = i // SLOTS
        assert wave * SERVICE_MS - spread_ms - tol <= queue <= wave * SERVICE_MS + tol, (i, queues)


def worst_deviation(metrics: list[dict]) -> float:
    """The largest distance (ms) of a TTFT or generation time from the schedule (for the failure message)."""
    return max(max(abs(m["time_to_first_token_ms"] - TTFT_MS), abs(m["generation_time_ms"] - (TOKENS - 1) * ITL_MS))
               for m in metrics)


@pytest.mark.unit
@pytest.mark.serial
def test_mock_slots_report_their_schedule_in_process():
    """Six requests at once on 2 slots of 100 ms: waits of 0, 0, 100, 100, 200, 200 ms, each exactly in order."""
    engine = MockEngine("mock", "mock", ttft_ms=TTFT_MS, itl_ms=ITL_MS, slots=SLOTS)
    timings = [RequestTiming() for _ in range(REQUESTS)]

    async def one(timing: RequestTiming) -> int:
        last = None
        async for last in engine.generate("r", PreparedPrompt("hi", (0,)), SamplingParams(max_tokens=TOKENS), timing):
            pass
        return last.completion_tokens

    async def run() -> list[int]:
        await one(RequestTiming())  # first-call costs (lazy imports, the loop's set-up) out of the measured waves
        return await asyncio.gather(*(one(t) for t in timings))

    tokens = asyncio.run(run())
    metrics = [t.metrics_ms(n) for t, n in zip(timings, tokens)]
    assert_on_schedule(metrics)
    arrival_spread_ms = (timings[-1].queued - timings[0].queued) * 1000
    for i, m in enumerate(metrics):  # in arrival order, each one its own wave
        assert m["queue_time_ms"] == pytest.approx((i // SLOTS) * SERVICE_MS, abs=SCHEDULE_TOLERANCE_MS), metrics
    assert arrival_spread_ms < 1.0, arrival_spread_ms


async def concurrent_metrics(base_url: str, streamed: bool) -> list[tuple[dict, float, float]]:
    """REQUESTS requests at once (chat, completions, responses in turn) on connections opened beforehand, so that
    they reach the server together: each one's ``(metrics, client E2E ms, send time)``."""
    limits = httpx.Limits(max_connections=REQUESTS, max_keepalive_connections=REQUESTS)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:

        async def one(i: int, tokens: int) -> tuple[dict, float, float]:
            api = list(PATHS)[i % len(PATHS)]
            body = {**request_body(api, tokens), "stream": streamed}
            if streamed and api != "responses":
                body["stream_options"] = {"include_usage": True}
            sent = time.monotonic()
            async with client.stream("POST", PATHS[api], json=body) as resp:
                text = (await resp.aread()).decode()
            e2e = (time.monotonic() - sent) * 1000
            assert resp.status_code == 200, text
            final = json.loads(text if not streamed else
                               [line for line in text.splitlines() if line.startswith("data: {")][-1][len("data: "):])
            return final.get("metrics") or final["response"]["metrics"], e2e, sent

        await asyncio.gather(*(one(i, 1) for i in range(REQUESTS)))  # opens REQUESTS connections
        return await asyncio.gather(*(one(i, TOKENS) for i in range(REQUESTS)))


@pytest.mark.integration
@pytest.mark.serial
@pytest.mark.parametrize("streamed", [False, True], ids=["sync", "stream"])
def test_mock_slots_report_their_schedule_over_http(slotted_mock, streamed):
    """Six concurrent requests to 2 slots over HTTP: each one's metrics recover its wait, TTFT and decode."""
    results = asyncio.run(concurrent_metrics(slotted_mock, streamed))
    metrics = [m for m, _, _ in results]
    sent = [t for _, _, t in results]
    # sent together: within the arrival window the queue times allow for (5.4 ms once, on a busy machine)
    assert (max(sent) - min(sent)) * 1000 < ARRIVAL_WINDOW_MS, "the client did not send them together"
    assert worst_deviation(metrics) <= SCHEDULE_TOLERANCE_MS, metrics
    assert_on_schedule(metrics, ARRIVAL_WINDOW_MS)
    for m, e2e, _ in results:
        assert m["queue_time_ms"] + m["time_to_first_token_ms"] + m["generation_time_ms"] <= e2e


# --------------------------------------------------------------------------- the real model, naive and batched


@pytest.fixture(params=["naive", "batched"])
def model_server(request) -> str:
    return request.getfixturevalue("real_server" if request.param == "naive" else "batched_url")


def check_metrics(metrics: dict | None, tokens: int, e2e_ms: float) -> None:
    assert metrics is not None and list(metrics) == METRICS_FIELDS, metrics
    for name, value in metrics.items():
        assert isinstance(value, float) and math.isfinite(value) and value >= 0, (name, metrics)
    assert metrics["queue_time_ms"] + metrics["time_to_first_token_ms"] + metrics["generation_time_ms"] <= e2e_ms
    assert metrics["frontend_time_ms"] > 0
    assert metrics["mean_itl_ms"] == pytest.approx(metrics["generation_time_ms"] / (tokens - 1))
    inference_ms = metrics["time_to_first_token_ms"] + metrics["generation_time_ms"]
    assert metrics["tokens_per_second"] == pytest.approx(tokens / inference_ms * 1000, rel=1e-6)


@pytest.mark.integration
@pytest.mark.model
@pytest.mark.parametrize("streamed", [False, True], ids=["sync", "stream"])
@pytest.mark.parametrize("api", list(PATHS))
def test_real_engines_report_metrics_and_take_the_request_id(model_server, api, streamed):
    request_id = uuid.uuid4().hex
    headers = {"X-Request-Id": request_id, "traceparent": f"00-{request_id}-{uuid.uuid4().hex[:16]}-01"}
    answer, e2e = ask(model_server, api, request_body(api, 4), streamed, headers)
    assert completion_tokens(answer["usage"]) == 4
    check_metrics(answer["metrics"], 4, e2e)
    assert answer["id"] == ID_PREFIXES[api] + request_id
    if answer["headers"] is not None:  # (responses_stream does not return them; the sync answer checks them)
        assert answer["headers"]["x-request-id"] == request_id


@pytest.mark.integration
@pytest.mark.model
def test_naive_request_behind_another_reports_its_wait(real_server):
    """The naive engine generates one request at a time: one sent while another decodes waits in its queue."""
    long_body = {**request_body("completions", 48), "stream": True}
    with httpx.stream("POST", real_server + PATHS["completions"], timeout=120,
                      json={**long_body, "stream_options": {"include_usage": True}}) as first:
        lines = first.iter_lines()
        next(line for line in lines if line.startswith("data: {"))  # it decodes now
        behind, e2e = ask(real_server, "completions", request_body("completions", 2), False)
        final = [line for line in lines if line.startswith("data: {")][-1]
    ahead = json.loads(final[len("data: "):])["metrics"]
    waited = behind["metrics"]["queue_time_ms"]
    check_metrics(behind["metrics"], 2, e2e)
    # it waited for the rest of the first one's decoding (most of it: it was sent after its first token), plus
    # at most the worker's turn from one request to the next
    assert 0.5 * ahead["generation_time_ms"] <= waited <= ahead["generation_time_ms"] + 50, (waited, ahead)


# --------------------------------------------------------------------------- the request id


@pytest.mark.integration
def test_request_id_is_generated_when_absent_and_echoed(mock_url):
    resp = post(mock_url, PATHS["completions"], {"prompt": "hi", "max_tokens": 2})
    given = resp.headers["x-request-id"]
    assert len(given) == 32 and int(given, 16) >= 0 and resp.json()["id"] == "cmpl-" + given
    health = httpx.get(mock_url + "/health", headers={"X-Request-Id": "probe-1"}, timeout=10)
    assert health.headers["x-request-id"] == "probe-1"  # every answer carries it, as vLLM's middleware does
    two = [post(mock_url, PATHS["chat"], request_body("chat", 1)).headers["x-request-id"] for _ in range(2)]
    assert two[0] != two[1]


@pytest.mark.integration
@pytest.mark.parametrize("value", ["x" * 129, "has space", "tab\there", "caf\u00e9"],
                         ids=["too-long", "space", "tab", "non-ascii"])
def test_bad_request_id_gets_an_openai_shaped_400(mock_url, value):
    """(Other control characters never reach the app: uvicorn's parser answers 400 itself, as for vLLM.)"""
    resp = httpx.post(mock_url + PATHS["completions"], json={"prompt": "hi", "max_tokens": 2}, timeout=10,
                      headers=[("X-Request-Id", value.encode("latin-1"))])
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "invalid_request_id" and error["type"] == "invalid_request_error"
    assert "X-Request-Id" in error["message"] and "x-request-id" not in resp.headers
    longest = "y" * 128
    ok = post(mock_url, PATHS["completions"], {"prompt": "hi", "max_tokens": 2}, {"X-Request-Id": longest})
    assert ok.status_code == 200 and ok.json()["id"] == "cmpl-" + longest
