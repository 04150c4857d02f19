"""Every bad input gets an OpenAI-shaped error with the right status, and the server stays healthy.

The same table runs against the mock server and the real naive server (the
checks come before any generation, so the real one costs no decoding time):
``{"error": {"message", "type", "param", "code"}}``, the status, the ``param``
it blames and, where one exists, the code.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from server_client import post, post_ok, response_text

pytestmark = pytest.mark.integration

LONG_TEXT = "hello " * 3000  # more tokens (and words) than either server's context
USER = [{"role": "user", "content": "hi"}]


@dataclass(frozen=True)
class Bad:
    """One bad request and the error it must get."""

    name: str
    body: object  # dict sent as JSON, or bytes sent as they are
    status: int = 400
    param: str | None = None
    code: str | None = None
    path: str = "/v1/completions"
    content_type: str = "application/json"


def chat(**fields) -> dict:
    return {"messages": USER, **fields}


def completion(**fields) -> dict:
    return {"prompt": "hi", **fields}


CASES = [
    # not JSON, or not a JSON object
    Bad("invalid-json", b'{"prompt": "hi",'),
    Bad("empty-body", b""),
    Bad("json-array", b'[{"prompt": "hi"}]'),
    Bad("json-string", b'"hi"'),
    Bad("not-json-content-type", b"prompt=hi", content_type="application/x-www-form-urlencoded"),
    # missing fields
    Bad("missing-prompt", {"max_tokens": 4}, param="prompt"),
    Bad("missing-messages", {"max_tokens": 4}, param="messages", path="/v1/chat/completions"),
    Bad("empty-messages", {"messages": []}, param="messages", path="/v1/chat/completions"),
    Bad("message-without-content", {"messages": [{"role": "user"}]}, param="messages.0.content",
        path="/v1/chat/completions"),
    # wrong types
    Bad("prompt-null", {"prompt": None}, param="prompt"),
    Bad("prompt-list", {"prompt": ["a", "b"]}, param="prompt"),
    Bad("prompt-token-ids", {"prompt": [1, 2, 3]}, param="prompt"),
    Bad("max-tokens-string", completion(max_tokens="5"), param="max_tokens"),
    Bad("max-tokens-bool", completion(max_tokens=True), param="max_tokens"),
    Bad("max-tokens-float", completion(max_tokens=4.5), param="max_tokens"),
    Bad("temperature-string", completion(temperature="hot"), param="temperature"),
    Bad("stream-string", completion(stream="yes"), param="stream"),
    Bad("stop-number", completion(stop=5), param="stop"),
    Bad("seed-string", completion(seed="abc"), param="seed"),
    Bad("messages-string", {"messages": "hi"}, param="messages", path="/v1/chat/completions"),
    Bad("role-unknown", {"messages": [{"role": "robot", "content": "hi"}]}, param="messages.0.role",
        path="/v1/chat/completions"),
    Bad("ignore-eos-string", completion(ignore_eos="true"), param="ignore_eos"),
    # out-of-range values
    Bad("max-tokens-negative", completion(max_tokens=-1), param="max_tokens"),
    Bad("max-tokens-zero", completion(max_tokens=0), param="max_tokens"),
    Bad("max-completion-tokens-negative", chat(max_completion_tokens=-5), param="max_completion_tokens",
        path="/v1/chat/completions"),
    Bad("max-tokens-huge", completion(max_tokens=1_000_000), param="max_tokens", code="context_length_exceeded"),
    Bad("max-tokens-bignum", completion(max_tokens=10**30), param="max_tokens", code="context_length_exceeded"),
    Bad("chat-max-tokens-huge", chat(max_tokens=1_000_000), param="max_tokens", code="context_length_exceeded",
        path="/v1/chat/completions"),
    Bad("temperature-too-high", completion(temperature=2.5), param="temperature"),
    Bad("temperature-negative", completion(temperature=-0.1), param="temperature"),
    Bad("top-p-zero", completion(top_p=0), param="top_p"),
    Bad("top-p-above-one", completion(top_p=1.5), param="top_p"),
    Bad("min-tokens-negative", completion(min_tokens=-1), param="min_tokens"),
    Bad("min-tokens-above-max", completion(max_tokens=2, min_tokens=5), param="min_tokens"),
    Bad("seed-too-big", completion(seed=2**70), param="seed"),
    Bad("too-many-stops", completion(stop=["a", "b", "c", "d", "e"]), param="stop"),
    Bad("empty-stop", completion(stop=[""]), param="stop"),
    Bad("empty-prompt", completion(prompt=""), param="prompt"),
    # prompt longer than the context
    Bad("prompt-too-long", completion(prompt=LONG_TEXT, max_tokens=1), param="prompt",
        code="context_length_exceeded"),
    Bad("prompt-too-long-no-budget", completion(prompt=LONG_TEXT, max_tokens=None), param="prompt",
        code="context_length_exceeded"),
    Bad("chat-too-long", {"messages": [{"role": "user", "content": LONG_TEXT}]}, param="messages",
        code="context_length_exceeded", path="/v1/chat/completions"),
    Bad("chat-too-long-with-budget", {"messages": [{"role": "user", "content": LONG_TEXT}], "max_tokens": 1},
        param="messages", code="context_length_exceeded", path="/v1/chat/completions"),
    # unknown model
    Bad("unknown-model", completion(model="no-such-model"), status=404, param="model", code="model_not_found"),
    Bad("chat-unknown-model", chat(model="gpt-4"), status=404, param="model", code="model_not_found",
        path="/v1/chat/completions"),
    # options the engines do not implement
    Bad("n-2", completion(n=2), param="n", code="unsupported_parameter"),
    Bad("chat-n-3", chat(n=3), param="n", code="unsupported_parameter", path="/v1/chat/completions"),
    Bad("best-of", completion(best_of=2), param="best_of", code="unsupported_parameter"),
    Bad("echo", completion(echo=True), param="echo", code="unsupported_parameter"),
    Bad("logprobs", completion(logprobs=2), param="logprobs", code="unsupported_parameter"),
    Bad("suffix", completion(suffix="end"), param="suffix", code="unsupported_parameter"),
    Bad("logit-bias", completion(logit_bias={"50256": -100}), param="logit_bias", code="unsupported_parameter"),
    Bad("frequency-penalty", completion(frequency_penalty=0.5), param="frequency_penalty",
        code="unsupported_parameter"),
    Bad("presence-penalty", chat(presence_penalty=0.5), param="presence_penalty", code="unsupported_parameter",
        path="/v1/chat/completions"),
    Bad("chat-logprobs", chat(logprobs=True), param="logprobs", code="unsupported_parameter",
        path="/v1/chat/completions"),
    Bad("tools", chat(tools=[{"type": "function", "function": {"name": "f"}}]), param="tools",
        code="unsupported_parameter", path="/v1/chat/completions"),
    Bad("json-mode", chat(response_format={"type": "json_object"}), param="response_format",
        code="unsupported_parameter", path="/v1/chat/completions"),
    Bad("stream-options-without-stream", completion(stream_options={"include_usage": True}),
        param="stream_options", code="unsupported_parameter"),
    # routes
    Bad("unknown-route", completion(), status=404, path="/v1/nothing"),
    Bad("unknown-root-route", completion(), status=404, path="/generate"),
]


def assert_openai_error(resp: httpx.Response, status: int, param: str | None = None, code: str | None = None):
    """The response is ``{"error": {message, type, param, code}}`` with this status (and param/code)."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert list(body) == ["error"], body
    error = body["error"]
    assert list(error) == ["message", "type", "param", "code"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert "Traceback" not in error["message"] and "File \"" not in error["message"]
    assert isinstance(error["type"], str) and error["type"]
    assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error


@pytest.fixture(scope="module", params=["mock", pytest.param("real", marks=pytest.mark.model)])
def any_server(request) -> str:
    return request.getfixturevalue("mock_url" if request.param == "mock" else "real_server")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_request_gets_an_openai_error(any_server, case: Bad):
    resp = post(any_server, case.path, case.body, headers={"Content-Type": case.content_type}, timeout=30)
    assert_openai_error(resp, case.status, case.param, case.code)


def test_wrong_method_is_405(any_server):
    assert_openai_error(httpx.get(any_server + "/v1/completions"), 405)
    assert_openai_error(httpx.delete(any_server + "/v1/models"), 405)


def test_context_error_reports_the_numbers(any_server):
    """Like vLLM: the message names the context length and what was asked for."""
    health = httpx.get(any_server + "/health").json()
    resp = post(any_server, "/v1/completions", completion(max_tokens=health["max_model_len"]))
    assert_openai_error(resp, 400, "max_tokens", "context_length_exceeded")
    assert f"maximum context length is {health['max_model_len']} tokens" in resp.json()["error"]["message"]


def test_server_stays_healthy_after_every_bad_request(any_server):
    """Runs after the table (same module, same server): health and a real generation still work."""
    for case in CASES:  # once more, back to back, then a good request
        post(any_server, case.path, case.body, headers={"Content-Type": case.content_type}, timeout=30)
    assert httpx.get(any_server + "/health").json()["status"] == "ok"
    answer = post_ok(any_server, "/v1/completions", completion(max_tokens=2, temperature=0, ignore_eos=True))
    assert answer["usage"]["completion_tokens"] == 2 and response_text(answer)
