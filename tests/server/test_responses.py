"""``POST /v1/responses`` and the mock's reasoning and multi-token chunks, against real server processes.

The session mock (TTFT 100 ms, ITL 10 ms, 64-token context) answers the
Responses API in text and message input, sync and stream: every event's name,
order and sequence number, the text the deltas add up to, ``response.completed``
/ ``response.incomplete`` with usage, OpenAI-shaped errors; the official
``openai`` client reads it all. A mock with reasoning tokens shows them in every
API (both chat field names, usage's reasoning tokens), and one with several
tokens per chunk shows each chunk's running count (``continuous_usage_stats``).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from server.engines.hf_model import render_plain_chat
from server.engines.mock import MOCK_REASONING_WORDS, MOCK_WORDS
from server_client import MOCK_MAX_MODEL_LEN, MOCK_TTFT_MS, post, post_ok, responses_stream, stream

pytestmark = pytest.mark.integration

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours please"}]


def mock_text(tokens: int) -> str:
    return "".join(" " + MOCK_WORDS[i % len(MOCK_WORDS)] for i in range(tokens))


def reasoning_text(tokens: int) -> str:
    return "".join(" " + MOCK_REASONING_WORDS[i % len(MOCK_REASONING_WORDS)] for i in range(tokens))


def prompt_tokens(messages: list[dict]) -> int:
    return len(render_plain_chat(messages).split())


def test_sync_text_input_is_openai_shaped(mock_url):
    body = post_ok(mock_url, "/v1/responses", {"model": "mock", "input": "Name three colours", "max_output_tokens": 5,
                                               "metadata": {"run": "t"}})
    assert body["id"].startswith("resp_") and body["object"] == "response" and body["model"] == "mock"
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["error"] is None and body["max_output_tokens"] == 5 and body["metadata"] == {"run": "t"}
    [message] = body["output"]
    assert message["type"] == "message" and message["role"] == "assistant" and message["id"].startswith("msg_")
    assert message["content"] == [{"type": "output_text", "text": mock_text(5), "annotations": []}]
    inputs = prompt_tokens([{"role": "user", "content": "Name three colours"}])
    assert body["usage"] == {"input_tokens": inputs, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                             "output_tokens": 5,
                             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": inputs + 5}


def test_message_input_and_instructions_go_through_the_chat_template(mock_url):
    messages = [{"role": "user", "content": [{"type": "input_text", "text": "Name three colours please"}]}]
    body = post_ok(mock_url, "/v1/responses", {"input": messages, "instructions": "Be brief.", "max_output_tokens": 3})
    assert body["usage"]["input_tokens"] == prompt_tokens(CHAT) and body["instructions"] == "Be brief."
    chat = post_ok(mock_url, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 3})
    assert body["output"][0]["content"][0]["text"] == chat["choices"][0]["message"]["content"]


def test_stream_events_in_order_with_usage_at_the_end(mock_url):
    events, arrivals = responses_stream(mock_url, {"input": CHAT, "max_output_tokens": 4})
    kinds = [e["type"] for e in events]
    assert kinds == (["response.created", "response.in_progress", "response.output_item.added",
                      "response.content_part.added"] + ["response.output_text.delta"] * 4
                     + ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                        "response.incomplete"])
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["usage"] is None
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(d["delta"] for d in deltas) == mock_text(4)
    assert {d["item_id"] for d in deltas} == {events[2]["item"]["id"]}
    assert events[-4]["text"] == mock_text(4)
    final = events[-1]["response"]
    assert final["status"] == "incomplete" and final["output"][0]["content"][0]["text"] == mock_text(4)
    assert final["usage"]["output_tokens"] == 4 and final["usage"]["input_tokens"] == prompt_tokens(CHAT)
    # lifecycle events go out at once; the first delta when the first token is due
    first_delta = arrivals[kinds.index("response.output_text.delta")]
    assert arrivals[0] < first_delta and first_delta >= MOCK_TTFT_MS / 1000 - 0.002


def test_an_answer_that_ends_by_itself_is_completed(mock_url):
    """A budget the context cuts short still ends on ``length``; the mock never stops early, so ``completed``
    is checked on a greedy real model in test_real_model; here the unset budget fills the context."""
    body = post_ok(mock_url, "/v1/responses", {"input": "Hi"})
    assert body["usage"]["total_tokens"] == MOCK_MAX_MODEL_LEN


def test_every_event_and_body_validates_as_the_openai_sdk_types(reasoning_mock):
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    events, _ = responses_stream(reasoning_mock, {"input": "Think", "max_output_tokens": 6})
    typed = [TypeAdapter(ResponseStreamEvent).validate_python(event) for event in events]  # strict: raises if off
    assert [type(e).__name__ for e in typed][-1] == "ResponseIncompleteEvent"
    Response.model_validate(post_ok(reasoning_mock, "/v1/responses", {"input": "Think", "max_output_tokens": 6}))


def test_openai_client_reads_responses(mock_url):
    client = openai.OpenAI(base_url=mock_url + "/v1", api_key="unused", max_retries=0)
    response = client.responses.create(model="mock", input="Name three colours", max_output_tokens=3)
    assert response.output_text == mock_text(3) and response.usage.output_tokens == 3
    events = list(client.responses.create(model="mock", input=CHAT, max_output_tokens=3, stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == mock_text(3)
    assert events[-1].type == "response.incomplete" and events[-1].response.usage.output_tokens == 3
    assert events[-1].response.output_text == mock_text(3)


@pytest.mark.parametrize("body, status, param", [
    ({"input": "x", "tools": [{"type": "function", "name": "f"}]}, 400, "tools"),
    ({"input": "x", "previous_response_id": "resp_1"}, 400, "previous_response_id"),
    ({"input": "x", "background": True}, 400, "background"),
    ({"input": "x", "reasoning": {"effort": "high"}}, 400, "reasoning"),
    ({"input": "x", "text": {"format": {"type": "json_object"}}}, 400, "text.format"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}, 400, None),
    ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": 1000}, 400, "max_output_tokens"),
    ({"input": "word " * 100}, 400, "input"),
    ({"model": "nope", "input": "x"}, 404, "model"),
    ({"input": 5}, 400, "input"),
])
def test_bad_requests_get_openai_shaped_errors(mock_url, body, status, param):
    resp = post(mock_url, "/v1/responses", body)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] is not None and error["param"].startswith(param), error


# --------------------------------------------------------------------------- reasoning and multi-token chunks


def test_reasoning_in_chat_sync_and_usage(reasoning_mock):
    body = post_ok(reasoning_mock, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 7})
    message = body["choices"][0]["message"]
    assert message == {"role": "assistant", "content": mock_text(4), "reasoning_content": reasoning_text(3)}
    assert body["usage"]["completion_tokens"] == 7
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
    health = httpx.get(reasoning_mock + "/health").json()
    assert (health["reasoning_tokens"], health["reasoning_field"], health["tokens_per_chunk"]) == (
        3, "reasoning_content", 2)


def test_continuous_usage_gives_each_chunk_its_running_count(reasoning_mock):
    options = {"include_usage": True, "continuous_usage_stats": True}
    result = stream(reasoning_mock, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 7,
                                                              "stream_options": options})
    role, *chunks, final = result.chunks
    assert role["usage"]["completion_tokens"] == 0
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [{"reasoning_content": " hmm let"}, {"content": " the", "reasoning_content": " me"},
                      {"content": " quick brown"}, {"content": " fox"}]  # 2 tokens per chunk, the last alone
    assert [c["usage"]["completion_tokens"] for c in chunks] == [2, 4, 6, 7]
    assert [c["usage"]["completion_tokens_details"]["reasoning_tokens"] for c in chunks] == [2, 3, 3, 3]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 7
    # without continuous_usage_stats, only the final chunk has usage (as before)
    plain = stream(reasoning_mock, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 7,
                                                             "stream_options": {"include_usage": True}})
    assert [c["usage"] is None for c in plain.chunks] == [True] * 5 + [False]


def test_completions_carry_reasoning_as_text(reasoning_mock):
    body = post_ok(reasoning_mock, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5})
    assert body["choices"][0]["text"] == reasoning_text(3) + mock_text(2)
    options = {"include_usage": True, "continuous_usage_stats": True}
    result = stream(reasoning_mock, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5,
                                                         "stream_options": options})
    assert [c["usage"]["completion_tokens"] for c in result.chunks] == [2, 4, 5, 5]
    assert result.text() == reasoning_text(3) + mock_text(2)


def test_reasoning_in_responses(reasoning_mock):
    events, _ = responses_stream(reasoning_mock, {"input": "Think", "max_output_tokens": 6})
    kinds = [e["type"] for e in events]
    assert kinds[2:4] == ["response.output_item.added", "response.content_part.added"]
    assert events[2]["item"]["type"] == "reasoning" and events[3]["part"]["type"] == "reasoning_text"
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    answer = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert (reasoning, answer) == (reasoning_text(3), mock_text(3))
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    assert final["usage"]["output_tokens"] == 6 and final["usage"]["output_tokens_details"] == {"reasoning_tokens": 3}
    sync = post_ok(reasoning_mock, "/v1/responses", {"input": "Think", "max_output_tokens": 6})
    assert json.dumps(sync["output"][0]["content"]) == json.dumps([{"type": "reasoning_text",
                                                                    "text": reasoning_text(3)}])
    client = openai.OpenAI(base_url=reasoning_mock + "/v1", api_key="unused", max_retries=0)
    assert client.responses.create(model="mock", input="Think", max_output_tokens=6).output_text == mock_text(3)
