"""The registry of API styles: one handler per style, each with its path, body, stream end and sync body."""

import pytest

from llmload.core.apis import APIS, STYLES, APIStyle, GenerationParams, api_style, build_body
from llmload.core.records import PromptRecord
from llmload.core.wire import StreamReader, read_body

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
