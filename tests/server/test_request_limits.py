"""Request limits: stalled headers are closed, slow bodies get 408, oversize bodies 413, all in OpenAI's shape.

The header timeout is tested on both of uvicorn's HTTP/1.1 protocols (httptools and h11) with a tiny app in
this process, then on ``python -m server`` with stalled connections beside a normal request. Every socket
loop is bounded in time.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from llmload.core.services import free_port
from server.limits import header_timeout_protocol
from server_client import post

HEADER_TIMEOUT_S = 1.5
BODY_TIMEOUT_S = 1.5
MAX_BODY = 1 << 20
PARTIAL_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: app"


def connect(base_url: str) -> socket.socket:
    parts = urlsplit(base_url)
    return socket.create_connection((parts.hostname, parts.port), timeout=10)


def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body: status, headers (lower-case names), body."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:]))
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the peer closes ``sock`` (EOF or reset) within ``seconds``; any data is read and dropped."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([sock], [], [], left)
        if ready:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
    return False


def wait_closed(socks: list[socket.socket], started: float, limit: float) -> list[float]:
    """Seconds from ``started`` at which each socket was closed by the server (inf: still open at ``limit``)."""
    closed = {}
    open_ = list(socks)
    while open_ and time.monotonic() - started < limit:
        ready, _, _ = select.select(open_, [], [], 0.1)
        for sock in ready:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                closed[sock] = time.monotonic() - started
                open_.remove(sock)
    return [closed.get(sock, float("inf")) for sock in socks]


def assert_openai_error(status: int, body: bytes, expected_status: int, code: str) -> dict:
    assert status == expected_status, body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code, error
    return error


# --------------------------------------------------------------------------- the protocol, both implementations


async def tiny_app(scope, receive, send):
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(params=[HttpToolsProtocol, H11Protocol], ids=["httptools", "h11"])
def tiny_server(request):
    """uvicorn in a thread with the header-timeout protocol on ``request.param``; yields the base URL."""
    port = free_port()
    config = uvicorn.Config(tiny_app, host="127.0.0.1", port=port, log_level="warning", lifespan="off",
                            http=header_timeout_protocol(HEADER_TIMEOUT_S, request.param), timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.mark.unit
def test_header_timeout_on_both_protocols(tiny_server):
    started = time.monotonic()
    silent, partial = connect(tiny_server), connect(tiny_server)
    partial.sendall(PARTIAL_HEAD)
    kept_alive = connect(tiny_server)
    kept_alive.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = read_response(kept_alive)
    assert (status, body) == (200, b"ok")
    answered = time.monotonic()
    kept_alive.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the next request stalls in its headers
    closed = wait_closed([silent, partial, kept_alive], started, HEADER_TIMEOUT_S + 5)
    assert all(HEADER_TIMEOUT_S * 0.9 <= t <= HEADER_TIMEOUT_S + 5 for t in closed[:2]), closed
    assert answered - started + HEADER_TIMEOUT_S * 0.9 <= closed[2] <= answered - started + HEADER_TIMEOUT_S + 5
    # A connection that sends each request's headers in time stays open across several timeouts.
    busy = connect(tiny_server)
    for _ in range(4):
        busy.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(busy)[0] == 200
        time.sleep(HEADER_TIMEOUT_S / 2)
    busy.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert read_response(busy)[0] == 200
    for sock in (silent, partial, kept_alive, busy):
        sock.close()


# --------------------------------------------------------------------------- python -m server


@pytest.fixture
def limited_server(server_factory) -> str:
    return server_factory("mock", "--header-timeout-s", str(HEADER_TIMEOUT_S), "--body-timeout-s",
                          str(BODY_TIMEOUT_S), "--max-body-bytes", str(MAX_BODY), "--mock-ttft-ms", "0",
                          "--mock-itl-ms", "0", "--max-model-len", "64", "--log-level", "warning")


def server_rss_mib(server_factory) -> float:
    return psutil.Process(server_factory.processes[-1].pid).memory_info().rss / 2**20


@pytest.mark.integration
def test_stalled_connections_are_closed_while_requests_are_served(limited_server):
    started = time.monotonic()
    stalled = [connect(limited_server) for _ in range(20)]
    for sock in stalled[::2]:
        sock.sendall(PARTIAL_HEAD)  # half of them stop inside their headers, the others send nothing
    for _ in range(3):
        resp = post(limited_server, "/v1/completions", {"prompt": "hi", "max_tokens": 3}, timeout=10)
        assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 3
    closed = wait_closed(stalled, started, HEADER_TIMEOUT_S + 8)
    assert all(HEADER_TIMEOUT_S * 0.9 <= t <= HEADER_TIMEOUT_S + 8 for t in closed), closed
    assert httpx.get(limited_server + "/health", timeout=10).status_code == 200
    for sock in stalled:
        sock.close()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.integration
def test_slow_body_gets_408_and_the_connection_closes(limited_server, framing):
    sock = connect(limited_server)
    if framing == "content-length":
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"prompt\": ")
    else:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\na\r\n{\"prompt\":\r\n")
    started = time.monotonic()
    status, headers, body = read_response(sock, timeout=BODY_TIMEOUT_S + 8)
    waited = time.monotonic() - started
    assert BODY_TIMEOUT_S * 0.9 <= waited <= BODY_TIMEOUT_S + 8, waited
    assert_openai_error(status, body, 408, "request_timeout")
    assert headers.get("connection") == "close"
    assert closed_within(sock, 5)
    sock.close()


@pytest.mark.integration
def test_oversize_content_length_gets_413_before_the_body_is_sent(limited_server):
    sock = connect(limited_server)
    started = time.monotonic()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 52428800\r\n\r\n")  # 50 MB announced, nothing sent
    status, _, body = read_response(sock, timeout=10)
    assert time.monotonic() - started < 2.0
    error = assert_openai_error(status, body, 413, "request_too_large")
    assert str(MAX_BODY) in error["message"]
    sock.close()


@pytest.mark.integration
def test_oversize_chunked_body_gets_413_once_the_limit_is_passed(limited_server):
    sock = connect(limited_server)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 65536
    for _ in range(MAX_BODY // len(piece) + 1):  # one piece past the limit, then the client waits
        sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
    started = time.monotonic()
    status, _, body = read_response(sock, timeout=10)
    assert time.monotonic() - started < 2.0
    assert_openai_error(status, body, 413, "request_too_large")
    sock.close()


def fifty_mb():
    piece = b"x" * (1 << 20)
    for _ in range(50):
        yield piece


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.integration
def test_a_50_mb_body_is_refused_without_growing_the_server(limited_server, server_factory, framing):
    """A client that sends its whole 50 MB body still reads the 413 (the rest is read and dropped)."""
    post(limited_server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=10)
    before = server_rss_mib(server_factory)
    content = b"x" * (50 << 20) if framing == "content-length" else fifty_mb()
    resp = httpx.post(limited_server + "/v1/completions", content=content, timeout=60,
                      headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and resp.json()["error"]["code"] == "request_too_large", resp.text
    assert server_rss_mib(server_factory) - before < 40
    # The connection and the server go on serving.
    assert post(limited_server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=10).status_code == 200


@pytest.mark.integration
def test_a_body_under_the_limit_is_served(limited_server):
    resp = post(limited_server, "/v1/completions", {"prompt": "hello " * 150_000, "max_tokens": 1}, timeout=30)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "context_length_exceeded", resp.text
    assert resp.json()["error"]["param"] == "prompt"
