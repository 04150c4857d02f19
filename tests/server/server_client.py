"""Small HTTP helpers the basic-server tests share: JSON calls, raw SSE streams read strictly, raw sockets,
``/metrics`` samples.

The stream reader checks the exact OpenAI wire format instead of tolerating
variants: every event is one ``data: <json>`` line closed by a blank line, and
the stream ends with ``data: [DONE]``.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from llmload.core.sse import iter_events

DONE_EVENT = "data: [DONE]\n\n"

#: The session mock server's schedule and context (small, so context errors need no big request).
MOCK_TTFT_MS = 100.0
MOCK_ITL_MS = 10.0
MOCK_MAX_MODEL_LEN = 64
#: The ``slotted_mock`` server's schedule: (slots, TTFT ms, ITL ms).
SLOTTED_MOCK = (2, 60.0, 10.0)

#: The per-request ``metrics`` object's fields, in order: vLLM's five, then the basic server's ``frontend_time_ms``.
METRICS_FIELDS = ["time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms", "tokens_per_second",
                  "frontend_time_ms"]


@dataclass
class StreamResult:
    """One streamed answer: the raw body, its decoded chunks, and the response headers."""

    raw: str
    chunks: list[dict]
    headers: httpx.Headers

    def text(self) -> str:
        """The concatenated generated text (``text`` or ``delta.content`` of every choice)."""
        parts = []
        for chunk in self.chunks:
            for choice in chunk["choices"]:
                parts.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
        return "".join(parts)

    def finish_reason(self) -> str | None:
        reasons = [c["finish_reason"] for chunk in self.chunks for c in chunk["choices"] if c["finish_reason"]]
        assert len(reasons) == 1, f"expected one finishing chunk, got {reasons}"
        return reasons[0]

    def usage(self) -> dict | None:
        """The usage of the final ``choices: []`` chunk (include_usage), or None."""
        last = self.chunks[-1]
        return last["usage"] if not last["choices"] else None

    def metrics(self) -> dict | None:
        """The per-request ``metrics`` of the final ``choices: []`` chunk (include_usage), or None."""
        last = self.chunks[-1]
        return last.get("metrics") if not last["choices"] else None


def split_sse(raw: str) -> list[dict]:
    """Decode an OpenAI SSE body, asserting its exact framing; return the JSON chunks (without [DONE])."""
    assert raw.endswith(DONE_EVENT), f"stream does not end with data: [DONE]: {raw[-200:]!r}"
    body = raw[: -len(DONE_EVENT)]
    assert body.endswith("\n\n") or body == "", "the event before [DONE] is not closed by a blank line"
    chunks = []
    for block in body.split("\n\n")[:-1] if body else []:
        assert block.startswith("data: "), f"event is not a single data line: {block[:200]!r}"
        assert "\n" not in block, f"event spans several lines: {block[:200]!r}"
        payload = json.loads(block[len("data: "):])
        assert isinstance(payload, dict), payload
        chunks.append(payload)
    return chunks


def post(base_url: str, path: str, body, headers: dict | None = None, timeout: float = 120.0) -> httpx.Response:
    """POST ``body`` (a dict as JSON, or raw bytes as they are) and return the response."""
    kwargs = {"content": body} if isinstance(body, (bytes, str)) else {"json": body}
    return httpx.post(base_url + path, headers=headers, timeout=timeout, **kwargs)


def post_ok(base_url: str, path: str, body: dict, headers: dict | None = None, timeout: float = 120.0) -> dict:
    """POST a request that must succeed; return the decoded JSON."""
    resp = post(base_url, path, body, headers, timeout)
    assert resp.status_code == 200, resp.text
    return resp.json()


def stream(base_url: str, path: str, body: dict, headers: dict | None = None,
           timeout: float = 120.0) -> StreamResult:
    """POST a ``stream: true`` request that must succeed; return its strictly decoded stream."""
    with httpx.stream("POST", base_url + path, json={**body, "stream": True}, headers=headers,
                      timeout=timeout) as resp:
        raw = resp.read().decode("utf-8")
        assert resp.status_code == 200, raw
        return StreamResult(raw, split_sse(raw), resp.headers)


def response_text(response: dict) -> str:
    """The generated text of a non-streamed completion or chat completion."""
    choice = response["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


def responses_stream(base_url: str, body: dict, headers: dict | None = None,
                     timeout: float = 60) -> tuple[list[dict], list[float]]:
    """The events of a streamed response (checked: each names its type on its ``event:`` line) and when each
    arrived (seconds from the request)."""
    events, arrivals = [], []
    start = time.monotonic()
    with httpx.stream("POST", base_url + "/v1/responses", json={**body, "stream": True}, headers=headers,
                      timeout=timeout) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for event in iter_events(line + "\n" for line in resp.iter_lines()):
            data = event.json()
            assert event.event == data["type"], (event.event, data["type"])
            events.append(data)
            arrivals.append(time.monotonic() - start)
    return events, arrivals


def open_raw_request(base_url: str, path: str, body: dict, headers: dict | None = None) -> socket.socket:
    """Send one HTTP/1.1 POST on a plain socket and return the socket, unread (to close it mid-answer)."""
    parts = urlsplit(base_url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
    data = json.dumps(body).encode()
    head = [f"POST {path} HTTP/1.1", f"Host: {parts.hostname}", "Content-Type: application/json",
            f"Content-Length: {len(data)}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    return sock


def read_until_events(sock: socket.socket, count: int) -> bytes:
    """Read from a streaming response until ``count`` SSE events have arrived."""
    received = b""
    while received.count(b"data: ") < count:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {received!r}"
        received += chunk
    return received


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    """Run ``fn`` and return (seconds it took, its result)."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - start, result


def scrape(base_url: str) -> dict[str, float]:
    """Every sample of ``/metrics`` by name, summed over label sets (the text must parse as Prometheus text)."""
    from prometheus_client.parser import text_string_to_metric_families

    resp = httpx.get(base_url + "/metrics", timeout=10)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain"), resp.text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            samples[sample.name] = samples.get(sample.name, 0.0) + sample.value
    return samples


def sample_while(base_url: str, busy, seconds: float, every: float = 0.05) -> list[dict[str, float]]:
    """Scrape ``/metrics`` every ``every`` s while ``busy()`` is true, for at most ``seconds``."""
    samples, deadline = [], time.monotonic() + seconds
    while busy() and time.monotonic() < deadline:
        samples.append(scrape(base_url))
        time.sleep(every)
    return samples
