"""The OpenAI wire protocol of the basic server, against the mock engine (no model, known timings).

The mock engine emits exactly ``max_tokens`` words (`` the quick brown ...``) and
counts a prompt's tokens as its words, so every field of every response can be
checked exactly: object types, ids, finish reasons, usage, the SSE framing and
the schedule (time to first token, inter-token delay).
"""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from server.engines.hf_model import render_plain_chat
from server.engines.mock import MOCK_WORDS
from server_client import (METRICS_FIELDS, MOCK_ITL_MS, MOCK_MAX_MODEL_LEN, MOCK_TTFT_MS, post_ok, response_text,
                           stream)

pytestmark = pytest.mark.integration

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours please"}]
PROMPT = "Once upon a time there"
ENDPOINTS = {
    "completions": ("/v1/completions", {"prompt": PROMPT}),
    "chat": ("/v1/chat/completions", {"messages": CHAT}),
}


def mock_text(tokens: int) -> str:
    return "".join(" " + MOCK_WORDS[i % len(MOCK_WORDS)] for i in range(tokens))


def mock_prompt_tokens(endpoint: str) -> int:
    text = PROMPT if endpoint == "completions" else render_plain_chat(CHAT)
    return len(text.split())


def test_health_and_models(mock_url):
    health = httpx.get(mock_url + "/health").json()
    assert health["status"] == "ok" and health["engine"] == "mock"
    assert health["ttft_ms"] == MOCK_TTFT_MS and health["itl_ms"] == MOCK_ITL_MS
    models = httpx.get(mock_url + "/v1/models").json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [
        ("mock", "model", MOCK_MAX_MODEL_LEN)]


def test_completion_response_is_exactly_openai_shaped(mock_url):
    before = int(time.time())
    body = post_ok(mock_url, "/v1/completions", {"model": "mock", "prompt": PROMPT, "max_tokens": 5})
    # metrics: vLLM's per-request timing (--enable-per-request-metrics), always on here (test_server_timing.py)
    assert list(body) == ["id", "object", "created", "model", "choices", "usage", "metrics"]
    assert list(body["metrics"]) == METRICS_FIELDS
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert before <= body["created"] <= time.time() + 1 and body["model"] == "mock"
    assert body["choices"] == [{"index": 0, "text": mock_text(5), "logprobs": None, "finish_reason": "length"}]
    prompt_tokens = mock_prompt_tokens("completions")
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 5,
                             "total_tokens": prompt_tokens + 5}


def test_chat_response_is_exactly_openai_shaped(mock_url):
    body = post_ok(mock_url, "/v1/chat/completions", {"model": "mock", "messages": CHAT, "max_tokens": 4})
    assert list(body) == ["id", "object", "created", "model", "choices", "usage", "metrics"]
    assert list(body["metrics"]) == METRICS_FIELDS
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": mock_text(4)},
                                "logprobs": None, "finish_reason": "length"}]
    prompt_tokens = mock_prompt_tokens("chat")
    assert body["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 4,
                             "total_tokens": prompt_tokens + 4}


def test_completion_stream_wire_format(mock_url):
    result = stream(mock_url, "/v1/completions", {"prompt": PROMPT, "max_tokens": 6})
    assert result.headers["content-type"].startswith("text/event-stream")
    assert len(result.chunks) == 6
    first = result.chunks[0]
    assert first["id"].startswith("cmpl-") and first["object"] == "text_completion" and first["model"] == "mock"
    for i, chunk in enumerate(result.chunks):
        assert list(chunk) == ["id", "object", "created", "model", "choices"]  # no usage unless asked
        assert (chunk["id"], chunk["object"], chunk["created"]) == (first["id"], "text_completion", first["created"])
        assert chunk["choices"] == [{"index": 0, "text": " " + MOCK_WORDS[i], "logprobs": None,
                                     "finish_reason": "length" if i == 5 else None}]
    assert result.text() == mock_text(6)


def test_chat_stream_wire_format(mock_url):
    result = stream(mock_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 3})
    assert len(result.chunks) == 1 + 3  # the role chunk, then one per token
    ids = {c["id"] for c in result.chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "mock" for c in result.chunks)
    assert result.chunks[0]["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]
    deltas = [c["choices"][0] for c in result.chunks[1:]]
    assert [d["delta"] for d in deltas] == [{"content": " " + w} for w in MOCK_WORDS[:3]]
    assert [d["finish_reason"] for d in deltas] == [None, None, "length"]
    assert result.finish_reason() == "length" and result.text() == mock_text(3)


def test_chat_role_chunk_waits_for_the_first_token(mock_url):
    # as vLLM does: a client that times the first chunk with choices (vllm bench serve) then times the first token
    with httpx.stream("POST", mock_url + "/v1/chat/completions", timeout=30,
                      json={"messages": CHAT, "max_tokens": 2, "stream": True}) as response:
        started = time.perf_counter()
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        waited_ms = (time.perf_counter() - started) * 1000
        assert '"role":"assistant"' in first.replace(" ", "")
        assert waited_ms >= MOCK_TTFT_MS * 0.9, f"the role chunk came {waited_ms:.0f} ms after the headers"
        list(lines)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_include_usage_adds_a_final_usage_chunk(mock_url, endpoint):
    path, body = ENDPOINTS[endpoint]
    request = {**body, "max_tokens": 4}
    result = stream(mock_url, path, {**request, "stream_options": {"include_usage": True}})
    *content, last = result.chunks
    assert all(chunk["usage"] is None for chunk in content)  # OpenAI: null on every other chunk
    assert last["choices"] == [] and list(last) == ["id", "object", "created", "model", "choices", "usage", "metrics"]
    assert last["id"] == content[0]["id"] and list(last["metrics"]) == METRICS_FIELDS
    plain = post_ok(mock_url, path, request)
    assert last["usage"] == plain["usage"]
    assert plain["usage"]["completion_tokens"] == 4
    assert plain["usage"]["prompt_tokens"] == mock_prompt_tokens(endpoint)
    assert result.text() == response_text(plain)


def test_token_budgets(mock_url):
    """Completions default to 16 tokens; chat takes max_completion_tokens over max_tokens, else fills the context."""
    assert post_ok(mock_url, "/v1/completions", {"prompt": PROMPT})["usage"]["completion_tokens"] == 16
    both = post_ok(mock_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 5, "max_completion_tokens": 3})
    assert both["usage"]["completion_tokens"] == 3
    legacy = post_ok(mock_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 5})
    assert legacy["usage"]["completion_tokens"] == 5
    unlimited = post_ok(mock_url, "/v1/chat/completions", {"messages": CHAT})
    assert unlimited["usage"]["total_tokens"] == MOCK_MAX_MODEL_LEN
    assert unlimited["choices"][0]["finish_reason"] == "length"


def test_mock_schedule_matches_its_settings(mock_url):
    """The first token comes after the TTFT, the last after TTFT + (n-1) ITL, measured on the client.

    A server cannot send early, so the lower bounds are tight; the upper bounds allow for a busy machine.
    """
    tokens = 21
    start = time.perf_counter()
    arrivals = []
    with httpx.stream("POST", mock_url + "/v1/completions", timeout=30,
                      json={"prompt": PROMPT, "max_tokens": tokens, "stream": True}) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.perf_counter() - start)
    assert len(arrivals) == tokens
    ttft = MOCK_TTFT_MS / 1000
    total = ttft + (tokens - 1) * MOCK_ITL_MS / 1000
    assert ttft - 0.002 <= arrivals[0] <= ttft + 0.5, arrivals[0]
    assert total - 0.002 <= arrivals[-1] <= total + 0.5, arrivals[-1]


@pytest.fixture()
def keyed_mock(server_factory) -> str:
    return server_factory("mock", "--api-key", "s3cret", "--mock-ttft-ms", "0", "--mock-itl-ms", "0")


def test_api_key(keyed_mock):
    """Without or with a wrong bearer: 401 in OpenAI's shape; with the right one: served. /health stays open."""
    request = {"prompt": PROMPT, "max_tokens": 2}
    assert httpx.get(keyed_mock + "/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        for method, path, body in (("POST", "/v1/completions", request), ("GET", "/v1/models", None)):
            resp = httpx.request(method, keyed_mock + path, json=body, headers=headers)
            assert resp.status_code == 401, (headers, path)
            assert resp.json()["error"]["code"] == "invalid_api_key"
            assert set(resp.json()["error"]) == {"message", "type", "param", "code"}
    good = {"Authorization": "Bearer s3cret"}
    assert httpx.get(keyed_mock + "/v1/models", headers=good).status_code == 200
    assert response_text(post_ok(keyed_mock, "/v1/completions", request, good)) == mock_text(2)
    assert stream(keyed_mock, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2}, good).text() == mock_text(2)

    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_mock + "/v1", api_key="wrong").models.list()
    client = openai.OpenAI(base_url=keyed_mock + "/v1", api_key="s3cret")
    assert [m.id for m in client.models.list()] == ["mock"]


def test_openai_client_parses_every_answer(mock_url):
    """The official client reads both endpoints, sync and stream, including the usage chunk."""
    client = openai.OpenAI(base_url=mock_url + "/v1", api_key="unused", max_retries=0)
    completion = client.completions.create(model="mock", prompt=PROMPT, max_tokens=3)
    assert completion.choices[0].text == mock_text(3) and completion.usage.completion_tokens == 3
    chat = client.chat.completions.create(model="mock", messages=CHAT, max_completion_tokens=3)
    assert chat.choices[0].message.content == mock_text(3) and chat.choices[0].finish_reason == "length"

    chunks = list(client.completions.create(model="mock", prompt=PROMPT, max_tokens=3, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == mock_text(3)
    chunks = list(client.chat.completions.create(model="mock", messages=CHAT, max_tokens=3, stream=True,
                                                 stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == mock_text(3)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens == mock_prompt_tokens("chat")
