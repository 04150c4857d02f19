"""The wire format on the shapes servers really send: bodies, token chunks, usage, errors."""

import json

import pytest

from llmload.core.apis import GenerationParams, api_style, build_body
from llmload.core.wire import StreamReader, WireError, first_model_id, http_error_message
from llmload.core.wire import read_body as read_style_body
from llmload.core.metrics import request_metrics, RequestResult
from llmload.core.sse import SSEEvent
from llmload.core.records import PromptRecord

pytestmark = pytest.mark.unit

def read_body(api: str, body: bytes):
    return read_style_body(api_style(api), body)


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
                    "temperature": 0.0, "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True}, "ignore_eos": True}
    no_running_count = GenerationParams(api="chat", mode="stream", continuous_usage=False)
    assert build_body(RECORD, no_running_count, "m")["stream_options"] == {"include_usage": True}


def test_completion_sync_body_uses_prompt_and_record_budget():
    body = build_body(RECORD, GenerationParams(api="completion", mode="sync", temperature=0.5), "m")
    assert body == {"model": "m", "prompt": "Tell me a story.", "max_tokens": 64, "temperature": 0.5,
                    "stream": False}


def test_responses_bodies_send_input_and_max_output_tokens():
    stream = build_body(RECORD, GenerationParams(api="responses", mode="stream", max_tokens=16, ignore_eos=True), "m")
    assert stream == {"model": "m", "input": "Tell me a story.", "max_output_tokens": 16, "temperature": 0.0,
                      "stream": True, "store": False, "ignore_eos": True}  # no stream_options: not in the API
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    sync = build_body(RECORD, GenerationParams(api="responses", mode="sync"), "m", messages=history)
    assert sync == {"model": "m", "input": history, "max_output_tokens": 64, "temperature": 0.0, "stream": False,
                    "store": False}
    assert GenerationParams(api="responses").path == "/v1/responses"


def test_bad_api_or_mode_is_rejected():
    with pytest.raises(ValueError, match="api must be"):
        GenerationParams(api="embeddings")
    with pytest.raises(ValueError, match="mode must be"):
        GenerationParams(mode="batch")


def test_role_only_first_chunk_and_usage_chunk_are_not_tokens():
    reader = StreamReader(api_style("chat"))
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
    reader = StreamReader(api_style("completion"))
    events = [{"choices": [{"index": 0, "text": t}]} for t in (" a", "", " b")] + ["[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert out.success and out.output_tokens == 2 and out.output_tokens_source == "chunks"


def test_error_event_inside_a_200_stream_is_a_failure():
    reader = StreamReader(api_style("chat"))
    reader.feed(sse(chat_chunk("Hi"))[0], 0.1)
    reader.feed(b"\n", 0.1)
    reader.feed(b'data: {"error": {"message": "generation failed: CUDA OOM", "type": "internal_server_error"}}\n',
                0.2)
    with pytest.raises(WireError, match="error event in the stream: generation failed: CUDA OOM"):
        reader.feed(b"\n", 0.2)


def test_malformed_chunk_is_a_failure():
    reader = StreamReader(api_style("chat"))
    reader.feed(b"data: {not json\n", 0.1)
    with pytest.raises(WireError, match="malformed SSE"):
        reader.feed(b"\n", 0.1)
    reader = StreamReader(api_style("chat"))
    with pytest.raises(WireError, match="without a choices list"):
        feed_all(reader, [{"object": "chat.completion.chunk"}])


def test_stream_without_done_is_a_failure_and_unterminated_done_counts():
    reader = StreamReader(api_style("chat"))
    assert not feed_all(reader, [chat_chunk("a"), chat_chunk("b")])
    assert reader.outcome().error == "stream ended without [DONE]"
    assert StreamReader(api_style("chat")).outcome().error == "stream ended without any SSE event"
    reader = StreamReader(api_style("chat"))
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


# --------------------------------------------------------------------------- reasoning, tool calls, chunk tokens


def delta_chunk(usage=None, **delta):
    chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
    if usage is not None:
        chunk["usage"] = usage
    return chunk


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_chunks_are_output_chunks_and_the_answer_starts_later(field):
    reader = StreamReader(api_style("chat"))
    events = ([delta_chunk(role="assistant", content="")] + [delta_chunk(**{field: w}) for w in (" Let", " me", " see")]
              + [delta_chunk(content=" Four"), delta_chunk(content=".")]
              + [chat_chunk(choices=False, usage={"prompt_tokens": 5, "completion_tokens": 5,
                                                  "completion_tokens_details": {"reasoning_tokens": 3}}), "[DONE]"])
    assert feed_all(reader, events)
    out = reader.outcome()
    assert out.success
    assert out.token_offsets == pytest.approx([0.12, 0.14, 0.16, 0.18, 0.20])  # reasoning counts from the first
    assert out.first_output_offset == pytest.approx(0.18)
    assert (out.output_text, out.reasoning_text, out.output_chars) == (" Four.", " Let me see", 6)
    assert (out.output_tokens, out.reasoning_tokens) == (5, 3)
    result = RequestResult("id", "chat", "chat", "stream", 0.0, end_offset=0.25, token_offsets=out.token_offsets,
                           output_tokens=out.output_tokens, first_output_offset=out.first_output_offset,
                           reasoning_tokens=out.reasoning_tokens)
    m = request_metrics(result)
    assert m.ttft == pytest.approx(0.12) and m.ttfo == pytest.approx(0.18) and m.tpot == pytest.approx(0.02)
    assert m.reasoning_tokens == 3 and m.output_tokens == 5


def test_tool_call_deltas_are_answer_chunks():
    reader = StreamReader(api_style("chat"))
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    events = [delta_chunk(role="assistant", content=""), delta_chunk(reasoning="Need weather."),
              delta_chunk(tool_calls=[call]),
              delta_chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"city":'}}]),
              delta_chunk(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
              delta_chunk(tool_calls=[{"index": 1, "function": {"name": "get_time", "arguments": "{}"}}]),
              chat_chunk(choices=False, usage={"prompt_tokens": 9, "completion_tokens": 12}), "[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert out.success and out.tool_calls == 2 and out.output_text == ""
    assert len(out.token_offsets) == 5 and out.first_output_offset == pytest.approx(0.14)
    sync = {"choices": [{"index": 0, "message": {"role": "assistant", "content": None, "reasoning_content": "Hm.",
                                                 "tool_calls": [call]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 2}}}
    out = read_body("chat", json.dumps(sync).encode())
    assert out.success and (out.tool_calls, out.reasoning_text, out.reasoning_tokens, out.output_text) == (
        1, "Hm.", 2, "")


def test_continuous_usage_gives_each_chunk_its_token_count():
    reader = StreamReader(api_style("chat"))
    running = lambda n: {"prompt_tokens": 5, "completion_tokens": n}  # noqa: E731
    events = [delta_chunk(running(0), role="assistant", content=""), delta_chunk(running(1), content=" a"),
              delta_chunk(running(4), content=" b c d"), delta_chunk(running(4), content=""),  # no text: no chunk
              delta_chunk(running(6), content=" e f"), chat_chunk(choices=False, usage=running(6)), "[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert (out.chunk_tokens, out.chunk_tokens_source, out.output_tokens) == ([1, 3, 2], "usage", 6)
    assert out.token_offsets == pytest.approx([0.12, 0.14, 0.18]) and out.flags == []


def test_without_running_counts_chunks_of_several_tokens_are_flagged():
    reader = StreamReader(api_style("completion"))
    events = [{"choices": [{"index": 0, "text": t}]} for t in (" a b", " c d", " e f")]
    events += [{"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 6}}, "[DONE]"]
    assert feed_all(reader, events)
    out = reader.outcome()
    assert (out.chunk_tokens, out.chunk_tokens_source, out.flags) == ([], "chunks", ["itl_per_chunk"])
    assert out.chunk_texts == [" a b", " c d", " e f"]
    out.count_chunks([2, 2, 2])  # a tokenizer's counts
    assert (out.chunk_tokens, out.chunk_tokens_source, out.flags) == ([2, 2, 2], "tokenizer", [])


# --------------------------------------------------------------------------- the Responses API


def responses_lines(events):
    """Named SSE events as the Responses API sends them (``event:`` then ``data:``), one list per event."""
    return [[f"event: {e['type']}\n".encode(), f"data: {json.dumps(e)}\n".encode(), b"\n"] for e in events]


def feed_responses(reader, events, start=0.1, step=0.02):
    for i, lines in enumerate(responses_lines(events)):
        for line in lines:
            if reader.feed(line, start + i * step):
                return True
    return reader.end()


def response_object(status="completed", usage=None, output=()):
    return {"id": "resp_1", "object": "response", "status": status, "output": list(output), "error": None,
            "usage": usage}


USAGE = {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 4,
         "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 11}


@pytest.mark.parametrize("end", ["response.completed", "response.incomplete"])
def test_responses_stream_events(end):
    reader = StreamReader(api_style("responses"))
    events = [{"type": "response.created", "sequence_number": 0, "response": response_object("in_progress")},
              {"type": "response.in_progress", "sequence_number": 1, "response": response_object("in_progress")},
              {"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1"}},
              {"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": "Hmm"},
              {"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": " ok"},
              {"type": "response.output_item.added", "item": {"type": "message", "id": "msg_1"}},
              {"type": "response.output_text.delta", "item_id": "msg_1", "delta": " Hi"},
              {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "!"},
              {"type": "response.output_text.done", "item_id": "msg_1", "text": " Hi!"},
              {"type": end, "response": response_object(end.split(".")[1], USAGE)}]
    assert feed_responses(reader, events)
    out = reader.outcome()
    assert out.success, out.error
    assert out.token_offsets == pytest.approx([0.16, 0.18, 0.22, 0.24])  # lifecycle events are not tokens
    assert out.first_output_offset == pytest.approx(0.22)
    assert (out.output_text, out.reasoning_text) == (" Hi!", "Hmm ok")
    assert (out.output_tokens, out.output_tokens_source, out.prompt_tokens, out.reasoning_tokens) == (4, "usage", 7, 2)
    assert out.chunk_tokens_source == "chunks" and out.flags == []


def test_responses_event_name_from_the_event_line_when_data_has_no_type():
    reader = StreamReader(api_style("responses"))
    for line in (b"event: response.output_text.delta\n", b'data: {"delta": "x"}\n', b"\n",
                 b"event: response.completed\n", b'data: {"response": {"usage": {"output_tokens": 1}}}\n', b"\n"):
        reader.feed(line, 0.1)
    out = reader.outcome()
    assert out.success and out.token_offsets == [0.1] and out.output_tokens == 1


def test_responses_failures_are_one_line():
    failed = {"type": "response.failed", "response": {**response_object("failed"),
                                                      "error": {"code": "server_error", "message": "boom\nat x"}}}
    reader = StreamReader(api_style("responses"))
    with pytest.raises(WireError, match=r"^response.failed: boom at x$"):
        feed_responses(reader, [{"type": "response.output_text.delta", "delta": "a"}, failed])
    error = {"type": "error", "code": "rate_limit", "message": "too many", "sequence_number": 3}
    with pytest.raises(WireError, match="^error event in the stream: too many$"):
        feed_responses(StreamReader(api_style("responses")), [error])
    reader = StreamReader(api_style("responses"))
    assert not feed_responses(reader, [{"type": "response.output_text.delta", "delta": "a"}])
    assert reader.outcome().error == "stream ended without response.completed"


def test_responses_sync_bodies():
    output = [{"type": "reasoning", "id": "rs", "summary": [], "content": [{"type": "reasoning_text", "text": "Hm"}]},
              {"type": "message", "id": "m", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Hello", "annotations": []}]},
              {"type": "function_call", "id": "fc", "call_id": "c", "name": "f", "arguments": "{}"}]
    out = read_body("responses", json.dumps(response_object("incomplete", USAGE, output)).encode())
    assert out.success, out.error
    assert (out.output_text, out.reasoning_text, out.tool_calls, out.output_tokens, out.reasoning_tokens) == (
        "Hello", "Hm", 1, 4, 2)
    failed = {**response_object("failed"), "error": {"code": "server_error", "message": "engine died"}}
    assert read_body("responses", json.dumps(failed).encode()).error == "error in the response body: engine died"
    assert read_body("responses", b'{"object": "response"}').error == "malformed JSON body: no output list"


def test_a_missing_endpoint_says_so():
    assert http_error_message(404, b'{"detail":"Not Found"}', "/v1/responses") == \
        "HTTP 404: the server has no /v1/responses (Not Found)"
    assert http_error_message(404, b"<html><body>404 Not Found</body></html>", "/v1/responses") == \
        "HTTP 404: the server has no /v1/responses (Not Found)"
    assert http_error_message(404, b"", "/v1/responses") == "HTTP 404: the server has no /v1/responses (Not Found)"
    # a 404 that says more is the server's own message (an unknown model)
    assert http_error_message(404, b'{"error": {"message": "The model `x` does not exist."}}', "/v1/responses") == \
        "HTTP 404: The model `x` does not exist."


# --------------------------------------------------------------------------- the fast path and its fallback

#: Raw SSE bodies, each read three ways below (fast path by lines, fast path in pieces, whole dicts by lines).
#: ``fast``: whether every event of it should be read without the whole-dict decoder.
STREAMS = {
    "regular": (True, b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}],'
                      b'"usage":{"prompt_tokens":4,"completion_tokens":0}}\n\n'
                      b'data: {"id":"c","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,'
                      b'"finish_reason":null}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}\n\n'
                      b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}\n\ndata: [DONE]\n\n'),
    "odd spacing": (True, b'data:{"choices":[{"delta":{"content":"a"}}]}\n\n'
                          b'data:   { "choices" : [ { "delta" : { "content" : "b" } } ] ,\t"usage" : '
                          b'{ "completion_tokens" : 2 } }  \n\n'
                          b'data: {"choices":[{"delta":{"content":"c"}}]}\r\n\r\n'
                          b': keep-alive\n\nid: 7\nretry: 100\ndata: [DONE]\r\n\r\n'),
    "escaped quotes and unicode": (True, b'data: {"choices":[{"delta":{"content":"say \\"hi\\"\\n"}}]}\n\n'
                                         b'data: {"choices":[{"delta":{"content":"caf\\u00e9 \\ud83d\\ude00"}}]}\n\n'
                                         + 'data: {"choices":[{"delta":{"content":"日本語 é"}}]}\n\n'.encode()
                                         + b'data: [DONE]\n\n'),
    "reasoning and tool calls": (True, b'data: {"choices":[{"delta":{"reasoning_content":"Hm"}}]}\n\n'
                                       b'data: {"choices":[{"delta":{"reasoning":" ok","content":null}}]}\n\n'
                                       b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"x","function":'
                                       b'{"name":"f","arguments":"{"}}]}}]}\n\n'
                                       b'data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}},'
                                       b'{"index":3,"function":null}]}}]}\n\n'
                                       b'data: {"choices":[{"delta":{"content":"Done"}}],"usage":{"completion_tokens":'
                                       b'9,"completion_tokens_details":{"reasoning_tokens":4},"prompt_tokens":2}}\n\n'
                                       b'data: {"choices":[],"usage":{"completion_tokens":9,"reasoning_tokens":5}}\n\n'
                                       b'data: [DONE]\n\n'),
    "sync-shaped message": (True, b'data: {"choices":[{"message":{"content":"whole"}}]}\n\ndata: [DONE]\n\n'),
    "multi-line data": (True, b'data: {"choices":[{"delta":\ndata: {"content":"x"}}]}\n\ndata: [DONE]\n\n'),
    # types the typed structs turn down: read from the dict, with the same result
    "content not a string": (False, b'data: {"choices":[{"delta":{"content":["a"]}}]}\n\n'
                                    b'data: {"choices":[{"delta":{"content":"b"}}]}\n\ndata: [DONE]\n\n'),
    "count not an integer": (False, b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":true}}'
                                    b'\n\ndata: {"choices":[{"delta":{"content":"b"}}],"usage":{"completion_tokens":2.0,'
                                    b'"prompt_tokens":"3"}}\n\ndata: [DONE]\n\n'),
    "responses names in a chunk": (False, b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"output_tokens":1,'
                                          b'"input_tokens":2}}\n\ndata: [DONE]\n\n'),
    # failures: the same one-line message either way
    "not JSON": (False, b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {this is not json\n\n'),
    "not an object": (False, b'data: [1, 2]\n\n'),
    "no choices": (False, b'data: {"object":"chat.completion.chunk"}\n\n'),
    "choice not an object": (False, b'data: {"choices":["a"]}\n\n'),
    "error event": (False, b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
                           b'data: {"error":{"message":"generation failed:\\nOOM"}}\n\n'),
    "error null": (False, b'data: {"error":null,"choices":[]}\n\n'),
    "not UTF-8": (False, b'data: {"choices":[{"delta":{"content":"\xff"}}]}\n\n'),
    "no [DONE]": (True, b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'),
}


def read_stream(body: bytes, pieces: list[bytes], fast: bool, api: str = "chat"):
    """The Outcome (or the WireError's message) of ``body`` fed as ``pieces``, the i-th piece arriving at 0.1 + i."""
    assert b"".join(pieces) == body
    reader = StreamReader(api_style(api), fast=fast)
    try:
        for i, piece in enumerate(pieces):
            if reader.feed(piece, 0.1 + i):
                break
        else:
            reader.end()
    except WireError as exc:
        return str(exc)
    return reader.outcome()


def by_lines(body: bytes) -> list[bytes]:
    return body.splitlines(keepends=True)


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_fast_path_reads_what_the_whole_dicts_read(name, monkeypatch):
    typed, body = STREAMS[name]
    reference = read_stream(body, by_lines(body), fast=False)
    decoded = []
    original = SSEEvent.json
    monkeypatch.setattr(SSEEvent, "json", lambda event: decoded.append(event) or original(event))
    assert read_stream(body, by_lines(body), fast=True) == reference
    assert (not decoded) == typed, decoded  # regular events never reach the whole-dict decoder
    # every cut of the body into two reads, a line (and a character) split across them, reads the same;
    # the events completed by the second read are stamped with its arrival
    for cut in range(1, len(body)):
        pieces = [body[:cut], body[cut:]]
        assert read_stream(body, pieces, fast=True) == read_stream(body, pieces, fast=False), cut


def test_fast_path_outcomes_and_messages():
    ok = read_stream(STREAMS["escaped quotes and unicode"][1], by_lines(STREAMS["escaped quotes and unicode"][1]), True)
    assert ok.output_text == 'say "hi"\ncafé \U0001F600日本語 é' and ok.output_chars == len(ok.output_text)
    tools = read_stream(STREAMS["reasoning and tool calls"][1], by_lines(STREAMS["reasoning and tool calls"][1]), True)
    assert (tools.reasoning_text, tools.output_text, tools.tool_calls) == ("Hm ok", "Done", 2)  # calls 0 and 3
    assert (tools.output_tokens, tools.reasoning_tokens, tools.prompt_tokens) == (9, 5, None)
    assert tools.chunk_texts == ["Hm", " ok", "f{", "}", "Done"]
    odd = read_stream(STREAMS["odd spacing"][1], by_lines(STREAMS["odd spacing"][1]), True)
    assert odd.success and odd.output_text == "abc" and odd.output_tokens == 2
    assert read_stream(STREAMS["count not an integer"][1], by_lines(STREAMS["count not an integer"][1]),
                       True).output_tokens_source == "chunks"  # neither true nor 2.0 is a count
    messages = {name: read_stream(body, by_lines(body), True) for name, (_, body) in STREAMS.items()}
    assert messages["not JSON"] == "malformed SSE data (not JSON): '{this is not json'"
    assert messages["not an object"] == "malformed SSE data (not a JSON object): '[1, 2]'"
    assert messages["no choices"].startswith("malformed SSE: chunk without a choices list: ")
    assert messages["choice not an object"].startswith("malformed SSE: choice is not an object: ")
    assert messages["error event"] == "error event in the stream: generation failed: OOM"
    assert messages["error null"].startswith("error event in the stream: ")
    assert messages["not UTF-8"] == "malformed SSE: line is not UTF-8 (invalid start byte)"
    assert messages["no [DONE]"].error == "stream ended without [DONE]"


def test_responses_fast_path_and_its_fallback(monkeypatch):
    events = [{"type": "response.created", "response": response_object("in_progress")},
              {"type": "response.reasoning_text.delta", "item_id": "rs", "delta": "Hm"},
              {"type": "response.output_text.delta", "item_id": "m", "delta": "\u00e9\"x\""},
              {"type": "response.function_call_arguments.delta", "item_id": "fc", "delta": "{}"},
              {"type": "response.output_text.delta", "item_id": "m", "delta": 5},  # not text: read from the dict
              {"type": "response.completed", "response": response_object("completed", USAGE)}]
    body = b"".join(b"".join(lines) for lines in responses_lines(events))
    unnamed = b"".join(line for line in by_lines(body) if not line.startswith(b"event:"))  # the type alone names it
    for stream in (body, unnamed):
        reference = read_stream(stream, by_lines(stream), fast=False, api="responses")
        decoded = []
        original = SSEEvent.json
        monkeypatch.setattr(SSEEvent, "json", lambda event: decoded.append(event.data) or original(event))
        out = read_stream(stream, by_lines(stream), fast=True, api="responses")
        monkeypatch.setattr(SSEEvent, "json", original)
        assert out == reference and out.success
        assert (out.reasoning_text, out.output_text, out.tool_calls, out.output_tokens) == ("Hm", 'é"x"', 1, 4)
        assert [json.loads(d)["type"] for d in decoded] == [
            "response.created", "response.output_text.delta", "response.completed"]
        for cut in range(1, len(stream), 7):
            pieces = [stream[:cut], stream[cut:]]
            assert read_stream(stream, pieces, True, "responses") == read_stream(stream, pieces, False, "responses")
