"""The wire format on the shapes servers really send: bodies, token chunks, usage, errors."""

import json

import pytest

from llmload.core.wire import (
    GenerationParams,
    StreamReader,
    WireError,
    build_body,
    first_model_id,
    http_error_message,
    read_body,
)
from llmload.core.metrics import request_metrics, RequestResult
from llmload.core.records import PromptRecord

RECORD = PromptRecord(id="r1", task="chat", source="test", prompt="Tell me a story.",
                      messages=({"role": "user", "content": "Tell me a story."},), max_tokens=64, input_tokens=5)


def sse(payload) -> list[bytes]:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return [f"data: {data}\n".encode(), b"\n"]


def chat_chunk(content=None, role=None, usage=None, choices=True):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}] if choices else []}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def feed_all(reader, events, start=0.1, step=0.02):
    """Feed events, one arrival time per event (both lines of an event arrive together)."""
    for i, event in enumerate(events):
        for line in sse(event):
            if reader.feed(line, start + i * step):
                return True
    return reader.end()


def test_chat_stream_body_asks_for_usage_and_uses_messages():
    body = build_body(RECORD, GenerationParams(api="chat", mode="stream", max_tokens=16, ignore_eos=True), "m")
    assert body == {"model": "m", "messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 16,
                    "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
                    "ignore_eos": True}


def test_completion_sync_body_uses_prompt_and_record_budget():
    body = build_body(RECORD, GenerationParams(api="completion", mode="sync", temperature=0.5), "m")
    assert body == {"model": "m", "prompt": "Tell me a story.", "max_tokens": 64, "temperature": 0.5,
                    "stream": False}


def test_bad_api_or_mode_is_rejected():
    with pytest.raises(ValueError, match="api must be"):
        GenerationParams(api="embeddings")
    with pytest.raises(ValueError, match="mode must be"):
        GenerationParams(mode="batch")


def test_role_only_first_chunk_and_usage_chunk_are_not_tokens():
    reader = StreamReader("chat")
    events = [chat_chunk(role="assistant", content=""), chat_chunk("Hello"), chat_chunk(" world"), chat_chunk("!"),
              chat_chunk(choices=False, usage={"prompt_tokens": 5, "completion_tokens": 3}), "[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert out.success
    assert out.token_offsets == pytest.approx([0.12, 0.14, 0.16])  # role chunk at 0.10 is not TTFT
    assert (out.output_tokens, out.output_tokens_source, out.prompt_tokens) == (3, "usage", 5)
    assert out.output_chars == len("Hello world!")
    # the metrics module derives TTFT from the first *text* chunk and ignores the usage chunk
    result = RequestResult("id", "chat", "chat", "stream", 0.0, end_offset=0.2, token_offsets=out.token_offsets,
                           output_tokens=out.output_tokens)
    m = request_metrics(result)
    assert m.ttft == pytest.approx(0.12) and m.e2e == pytest.approx(0.16) and m.tpot == pytest.approx(0.02)


def test_completion_stream_without_usage_counts_chunks_and_says_so():
    reader = StreamReader("completion")
    events = [{"choices": [{"index": 0, "text": t}]} for t in (" a", "", " b")] + ["[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert out.success and out.output_tokens == 2 and out.output_tokens_source == "chunks"


def test_error_event_inside_a_200_stream_is_a_failure():
    reader = StreamReader("chat")
    reader.feed(sse(chat_chunk("Hi"))[0], 0.1)
    reader.feed(b"\n", 0.1)
    reader.feed(b'data: {"error": {"message": "generation failed: CUDA OOM", "type": "internal_server_error"}}\n',
                0.2)
    with pytest.raises(WireError, match="error event in the stream: generation failed: CUDA OOM"):
        reader.feed(b"\n", 0.2)


def test_malformed_chunk_is_a_failure():
    reader = StreamReader("chat")
    reader.feed(b"data: {not json\n", 0.1)
    with pytest.raises(WireError, match="malformed SSE"):
        reader.feed(b"\n", 0.1)
    reader = StreamReader("chat")
    with pytest.raises(WireError, match="without a choices list"):
        feed_all(reader, [{"object": "chat.completion.chunk"}])


def test_stream_without_done_is_a_failure_and_unterminated_done_counts():
    reader = StreamReader("chat")
    assert not feed_all(reader, [chat_chunk("a"), chat_chunk("b")])
    assert reader.outcome().error == "stream ended without [DONE]"
    assert StreamReader("chat").outcome().error == "stream ended without any SSE event"
    reader = StreamReader("chat")
    reader.feed(b"data: [DONE]", 0.3)  # last line without newline nor blank line
    assert reader.end() and reader.outcome().success


def test_sync_bodies():
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"}}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    out = read_body("chat", json.dumps(chat).encode())
    assert out.success and (out.output_tokens, out.output_tokens_source, out.output_chars) == (2, "usage", 8)
    assert read_body("completion", b'{"choices": [{"text": "x"}]}').output_tokens_source == "none"
    assert "malformed JSON body" in read_body("chat", b"<html>").error
    assert read_body("chat", b'{"error": {"message": "boom"}}').error == "error in the response body: boom"
    assert read_body("chat", b'{"choices": []}').error == "malformed JSON body: no choices"


def test_http_error_messages_are_one_line():
    assert http_error_message(404, b'{"error": {"message": "The model `x` does not exist.", "type": "nf"}}') == \
        "HTTP 404: The model `x` does not exist."
    assert http_error_message(422, b'{"detail": [{"msg": "field required"}]}').startswith("HTTP 422: ")
    assert http_error_message(502, b"Bad gateway\n<html>\n") == "HTTP 502: Bad gateway <html>"
    assert http_error_message(500, b"") == "HTTP 500 (empty body)"


def test_first_model_id():
    assert first_model_id(b'{"object": "list", "data": [{"id": "a"}, {"id": "b"}]}') == "a"
    with pytest.raises(WireError, match="lists no model"):
        first_model_id(b'{"data": []}')
