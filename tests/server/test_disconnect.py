"""A client that goes away stops its generation at once, on the naive engine (one request at a time).

Each test times a short request on the idle server, then starts a long one
(``ignore_eos`` and nearly the whole context: minutes of decoding), closes its
socket mid-answer and times the same short request again. Had the long
generation gone on, the short request would wait for all of it; it must
instead finish about as fast as on the idle server. Covered: a stream, a
non-streamed request, and a stream still waiting in the queue behind another.

On the mock engine, whose ``/health`` counts the generations in flight, the
same is checked directly (and with ``--api-key``, whose middleware must let the
disconnect through to the route).
"""

from __future__ import annotations

import time

import httpx
import pytest

from server_client import open_raw_request, post_ok, read_until_events, timed

pytestmark = pytest.mark.integration

SHORT = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
LONG_PROMPT = "Tell me a very long story about a dragon."
CHAT_PATH, COMPLETION_PATH = "/v1/chat/completions", "/v1/completions"


def long_request(base_url: str, chat: bool) -> dict:
    """A greedy request that would decode until the context is full."""
    max_model_len = httpx.get(base_url + "/health").json()["max_model_len"]
    body = {"max_tokens": max_model_len - 64, "ignore_eos": True, "temperature": 0}
    if chat:
        return {**body, "messages": [{"role": "user", "content": LONG_PROMPT}]}
    return {**body, "prompt": LONG_PROMPT}


def short_request_seconds(base_url: str) -> float:
    seconds, answer = timed(post_ok, base_url, COMPLETION_PATH, SHORT, timeout=90)
    assert answer["usage"]["completion_tokens"] == SHORT["max_tokens"]
    return seconds


def wait_for_health(base_url: str, within: float = 30.0, **expected) -> None:
    """Wait until ``/health`` reports ``expected`` (e.g. ``waiting=1``)."""
    deadline = time.monotonic() + within
    while True:
        info = httpx.get(base_url + "/health", timeout=10).json()
        if all(info.get(key) == value for key, value in expected.items()):
            return
        assert time.monotonic() < deadline, f"/health never reported {expected}: {info}"
        time.sleep(0.05)


def assert_not_delayed(idle: float, after: float) -> None:
    """After the disconnect the short request took about its idle time, not the long request's minutes.

    The allowance covers the one decode step the engine finishes before it sees
    the cancellation, on a busy machine; the long request needs hundreds of steps.
    """
    assert after <= 4 * idle + 5.0, f"short request took {after:.1f}s after the disconnect, {idle:.1f}s idle"


@pytest.mark.model
def test_stream_disconnect_stops_generation(real_server):
    idle = short_request_seconds(real_server)
    sock = open_raw_request(real_server, COMPLETION_PATH, {**long_request(real_server, chat=False), "stream": True})
    read_until_events(sock, 3)  # three tokens out: it is decoding now
    sock.close()
    assert_not_delayed(idle, short_request_seconds(real_server))


@pytest.mark.model
def test_non_stream_disconnect_stops_generation(real_server):
    idle = short_request_seconds(real_server)
    sock = open_raw_request(real_server, CHAT_PATH, long_request(real_server, chat=True))
    time.sleep(1.0)  # it has started decoding (nothing to read until it would finish)
    sock.close()
    assert_not_delayed(idle, short_request_seconds(real_server))


@pytest.mark.model
def test_disconnect_while_waiting_in_the_queue(real_server):
    """B waits behind A; B's client leaves, then A's: B must be dropped, not run after A."""
    idle = short_request_seconds(real_server)
    running = open_raw_request(real_server, COMPLETION_PATH, {**long_request(real_server, chat=False),
                                                              "stream": True})
    read_until_events(running, 2)
    queued = open_raw_request(real_server, CHAT_PATH, {**long_request(real_server, chat=True), "stream": True})
    wait_for_health(real_server, waiting=1)  # accepted and queued (its role chunk waits for its first token)
    queued.close()
    time.sleep(0.3)
    running.close()
    assert_not_delayed(idle, short_request_seconds(real_server))
    assert httpx.get(real_server + "/health").json()["status"] == "ok"


# --------------------------------------------------------------------------- mock engine: seen from /health


def running(base_url: str) -> int:
    return httpx.get(base_url + "/health").json()["running"]


def wait_running(base_url: str, expected: int, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while running(base_url) != expected:
        assert time.monotonic() < deadline, f"{running(base_url)} generations running, expected {expected}"
        time.sleep(0.05)


@pytest.mark.parametrize("api_key", [None, "k3y"], ids=["open", "api-key"])
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "non-stream"])
def test_mock_generation_ends_when_its_client_leaves(server_factory, api_key, streamed):
    flags = ["--mock-ttft-ms", "0", "--mock-itl-ms", "50", "--max-model-len", "4096"]
    url = server_factory("mock", *flags, *(["--api-key", api_key] if api_key else []))
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4000, "stream": streamed}  # 200 s
    sock = open_raw_request(url, CHAT_PATH, body, headers)
    if streamed:
        read_until_events(sock, 3)
    wait_running(url, 1)
    sock.close()
    wait_running(url, 0)
