"""The registry of API styles: one handler per style, each with its path, body, stream end and sync body."""

import pytest

from llmload.core.apis import APIS, STYLES, APIStyle, GenerationParams, api_style, build_body
from llmload.core.records import PromptRecord
from llmload.core.sse import SSEEvent
from llmload.core.wire import SERVER_TIMING_MALFORMED, StreamReader, read_body

pytestmark = pytest.mark.unit

RECORD = PromptRecord(id="r1", task="chat", source="test", prompt="Hi", messages=({"role": "user", "content": "Hi"},),
                      max_tokens=8, input_tokens=1)


def test_the_styles_by_name():
    assert APIS == ("completion", "chat", "responses")  # --api's choices, in this order
    assert {name: (style.path, style.stream_end) for name, style in STYLES.items()} == {
        "completion": ("/v1/completions", "[DONE]"),
        "chat": ("/v1/chat/completions", "[DONE]"),
        "responses": ("/v1/responses", "response.completed")}
    for name in APIS:
        assert isinstance(api_style(name), APIStyle) and api_style(name).name == name
        assert GenerationParams(api=name).style is STYLES[name] and GenerationParams(api=name).path == STYLES[name].path
    with pytest.raises(ValueError, match=r"^api must be one of completion, chat, responses \(got 'embeddings'\)$"):
        api_style("embeddings")


@pytest.mark.parametrize("api", APIS)
def test_each_style_builds_its_body_and_names_its_missing_end(api):
    params = GenerationParams(api=api, mode="stream", max_tokens=4)
    body = build_body(RECORD, params, "m")
    assert body == STYLES[api].build_body(RECORD, params, "m")
    assert list(body)[:2] == ["model", {"completion": "prompt", "chat": "messages", "responses": "input"}[api]]
    assert body[STYLES[api].budget_field] == 4 and body["stream"] is True
    reader = StreamReader(STYLES[api])
    reader.feed(b'data: {"type": "response.created", "choices": []}\n\n', 0.1)  # an event of either shape
    assert reader.outcome().error == f"stream ended without {STYLES[api].stream_end}"


@pytest.mark.parametrize("api", APIS)
def test_each_style_reads_the_other_styles_sync_body_as_malformed(api):
    bodies = {"completion": b'{"choices": [{"text": "a"}]}', "chat": b'{"choices": [{"message": {"content": "a"}}]}',
              "responses": b'{"output": [{"type": "message", "content": [{"text": "a"}]}]}'}
    assert read_body(STYLES[api], bodies[api]).output_text == "a"
    for other, body in bodies.items():
        if {api, other} != {"completion", "chat"} and other != api:  # completion and chat share the choices shape
            assert read_body(STYLES[api], body).error.startswith("malformed JSON body: no ")


# --------------------------------------------------------------------------- the server's per-request timing

#: vLLM's ``metrics`` (--enable-per-request-metrics), with its nested speculative-decoding group.
VLLM_METRICS = ('{"time_to_first_token_ms":20.5,"generation_time_ms":40,"queue_time_ms":1.5,"mean_itl_ms":20.0,'
                '"tokens_per_second":48.8,"speculative_decoding":{"mean_acceptance_length":1.2,'
                '"acceptance_histogram":[1,2]}}')
#: ``metrics`` as JSON text -> the server_timing kept (None: none), and whether it is flagged malformed.
TIMINGS = {
    "vllm": (VLLM_METRICS, {"time_to_first_token_ms": 20.5, "generation_time_ms": 40, "queue_time_ms": 1.5,
                            "mean_itl_ms": 20.0, "tokens_per_second": 48.8}, False),
    "basic server's extension": ('{"frontend_time_ms":0.4,"queue_time_ms":0}',
                                 {"frontend_time_ms": 0.4, "queue_time_ms": 0}, False),
    "a field not measured": ('{"queue_time_ms":null,"time_to_first_token_ms":3}', {"time_to_first_token_ms": 3},
                             False),
    "nothing measured": ('{"queue_time_ms":null}', None, False),
    "empty": ("{}", None, False),
    "null": ("null", None, False),
    "absent": (None, None, False),
    "a string": ('"fast"', None, True),
    "a list": ("[1,2]", None, True),
    "a number": ("5", None, True),
    "a value as text": ('{"queue_time_ms":"1.5","mean_itl_ms":2}', None, True),
    "negative": ('{"queue_time_ms":-0.1}', None, True),
    "a boolean": ('{"queue_time_ms":true}', None, True),
    "a list value": ('{"queue_time_ms":[1]}', None, True),
    "NaN": ('{"queue_time_ms":NaN}', None, True),  # not JSON, but Python's json reads it
    "infinite": ('{"queue_time_ms":1e999}', None, True),
}


def timed_stream(api: str, metrics: str | None) -> bytes:
    """Two output chunks and the end of ``api``'s stream, the end carrying ``metrics`` (JSON text; None: none)."""
    extra = "" if metrics is None else f',"metrics":{metrics}'
    if api == "responses":
        delta = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n'
        return delta * 2 + (f'event: response.completed\ndata: {{"type":"response.completed","response":'
                            f'{{"status":"completed","usage":{{"output_tokens":2}}{extra}}}}}\n\n').encode()
    choice = '{"index":0,"delta":{"content":"a"}}' if api == "chat" else '{"index":0,"text":"a"}'
    return "".join([f'data: {{"choices":[{choice}],"usage":{{"completion_tokens":{n}}}}}\n\n' for n in (1, 2)]
                   + [f'data: {{"choices":[],"usage":{{"prompt_tokens":3,"completion_tokens":2}}{extra}}}\n\n',
                      "data: [DONE]\n\n"]).encode()


def timed_body(api: str, metrics: str | None) -> bytes:
    extra = "" if metrics is None else f',"metrics":{metrics}'
    output = {"completion": '"choices":[{"text":"aa"}]', "chat": '"choices":[{"message":{"content":"aa"}}]',
              "responses": '"status":"completed","output":[{"type":"message","content":[{"text":"aa"}]}]'}[api]
    usage = '"output_tokens":2' if api == "responses" else '"completion_tokens":2'
    return f'{{{output},"usage":{{{usage}}}{extra}}}'.encode()


def read_whole(api: str, body: bytes, fast: bool):
    reader = StreamReader(STYLES[api], fast=fast)
    for line in body.splitlines(keepends=True):
        if reader.feed(line, 0.1):
            break
    return reader.outcome()


@pytest.mark.parametrize("case", list(TIMINGS))
@pytest.mark.parametrize("api", APIS)
def test_the_servers_timing_in_a_stream_both_ways_and_in_a_sync_body(api, case, monkeypatch):
    metrics, expected, malformed = TIMINGS[case]
    body = timed_stream(api, metrics)
    decoded = []
    original = SSEEvent.json
    monkeypatch.setattr(SSEEvent, "json", lambda event: decoded.append(event) or original(event))
    fast = read_whole(api, body, fast=True)
    monkeypatch.setattr(SSEEvent, "json", original)
    assert fast == read_whole(api, body, fast=False)
    sync = read_body(STYLES[api], timed_body(api, metrics))
    for out in (fast, sync):
        assert out.success and out.output_tokens == 2, out.error  # never a failed request
        assert out.server_timing == expected
        assert out.flags == ([SERVER_TIMING_MALFORMED] if malformed else [])
    if api != "responses" and case not in ("NaN", "infinite"):  # the typed path reads it (NaN is not JSON)
        assert decoded == []
    elif api == "responses":  # only the end event goes to the dict, as without metrics
        assert [event.event for event in decoded] == ["response.completed"]


def test_the_last_metrics_of_a_stream_count():
    body = timed_stream("chat", '{"queue_time_ms":"x"}').replace(b"data: [DONE]",
                                                                 b'data: {"choices":[],"metrics":{"queue_time_ms":2}}'
                                                                 b"\n\ndata: [DONE]")
    out = read_whole("chat", body, fast=True)
    assert out.server_timing == {"queue_time_ms": 2} and out.flags == []
