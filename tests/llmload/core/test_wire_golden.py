"""The wire format byte for byte as it was before the API styles became handlers (``wire_golden.json``).

``wire_golden.json`` was written by ``python tests/llmload/core/test_wire_golden.py`` on main at cca9d34,
before the refactor: the encoded request body of every API style x mode x ``ignore_eos`` x
``continuous_usage`` x messages x budget, and the Outcome (or the one-line error) of every stream of
``test_wire.py`` read as each style, both ways (typed fast path, whole dicts), and of a set of sync bodies.
These tests read the same inputs now and compare. Fields added to the Outcome since keep their defaults here.
Write the file again only for a change of the wire's behaviour made on purpose, and say so in its commit.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest

from llmload.core.records import PromptRecord
from llmload.core.apis import GenerationParams, api_style, build_body
from llmload.core.wire import Outcome, encode_body, read_body
from test_wire import STREAMS, USAGE, by_lines, read_stream, response_object, responses_lines

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).with_name("wire_golden.json")
APIS = ("completion", "chat", "responses")
RECORD = PromptRecord(id="r1", task="chat", source="test", prompt="Tell me a story.",
                      messages=({"role": "user", "content": "Tell me a story."},), max_tokens=64, input_tokens=5)
HISTORY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
           {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Tell me a story."}]


def body_cases() -> dict[str, str]:
    """Every combination's name -> its encoded body."""
    cases = {}
    for api, mode, ignore_eos, continuous, messages, budget in itertools.product(
            APIS, ("sync", "stream"), (False, True), (False, True), (None, "history", "lone"), (None, 16)):
        params = GenerationParams(api=api, mode=mode, max_tokens=budget, ignore_eos=ignore_eos,
                                  continuous_usage=continuous, temperature=0.0 if budget is None else 0.5)
        history = {None: None, "history": HISTORY, "lone": [{"role": "user", "content": "Just this."}]}[messages]
        name = f"{api} {mode} ignore_eos={ignore_eos} continuous={continuous} messages={messages} budget={budget}"
        cases[name] = encode_body(build_body(RECORD, params, "m", history)).decode("utf-8")
    return cases


def responses_body(events: list[dict], named: bool = True) -> bytes:
    lines = [line for event in responses_lines(events) for line in event]
    return b"".join(line for line in lines if named or not line.startswith(b"event:"))


RESPONSES_STREAMS = {
    "responses lifecycle": responses_body([
        {"type": "response.created", "sequence_number": 0, "response": response_object("in_progress")},
        {"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1"}},
        {"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": "Hmm"},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": " ok"},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": " Hi"},
        {"type": "response.refusal.delta", "item_id": "msg_1", "delta": " no"},
        {"type": "response.function_call_arguments.delta", "item_id": "fc", "delta": "{}"},
        {"type": "response.custom_tool_call_input.delta", "item_id": "ct", "delta": "x"},
        {"type": "response.output_text.delta", "item_id": "m", "delta": 5},
        {"type": "response.output_text.done", "item_id": "msg_1", "text": " Hi!"},
        {"type": "response.completed", "response": response_object("completed", USAGE)}]),
    "responses incomplete unnamed": responses_body([
        {"type": "response.output_text.delta", "item_id": "m", "delta": "a"},
        {"type": "response.incomplete", "response": response_object("incomplete", USAGE)}], named=False),
    "responses failed": responses_body([
        {"type": "response.output_text.delta", "delta": "a"},
        {"type": "response.failed", "response": {**response_object("failed"), "error": {"message": "boom\nat x"}}}]),
    "responses error": responses_body([{"type": "error", "code": "rate_limit", "message": "too many"}]),
    "responses no end": responses_body([{"type": "response.output_text.delta", "delta": "a"}]),
    "responses bad response": responses_body([{"type": "response.completed", "response": [1]}]),
    "responses event line only": (b"event: response.output_text.delta\ndata: {\"delta\": \"x\"}\n\n"
                                  b"event: response.completed\ndata: {\"response\": {\"usage\": "
                                  b"{\"output_tokens\": 1}}}\n\n"),
    "completion text": (b'data: {"choices":[{"index":0,"text":" a b"}],"usage":{"completion_tokens":2}}\n\n'
                        b'data: {"choices":[{"index":0,"text":""}]}\n\n'
                        b'data: {"choices":[{"index":0,"text":" c"}],"usage":{"completion_tokens":3}}\n\n'
                        b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3}}\n\ndata: [DONE]\n\n'),
    "completion usage zero": (b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[],"usage":'
                              b'{"completion_tokens":0}}\n\ndata: [DONE]\n\n'),
    "empty": b"",
    "comment only": b": keep-alive\n\n",
}

SYNC_BODIES = {
    "chat": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"}}],
                        "usage": {"prompt_tokens": 4, "completion_tokens": 2}}).encode(),
    "chat tools": json.dumps({"choices": [{"message": {"content": None, "reasoning_content": "Hm.", "tool_calls": [
        {"index": 0, "function": {"name": "f", "arguments": "{}"}}, {"function": {"name": "g"}}]}}],
        "usage": {"completion_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 2}}}).encode(),
    "chat reasoning": json.dumps({"choices": [{"message": {"content": "a", "reasoning": "b"}}],
                                  "usage": {"completion_tokens": 0}}).encode(),
    "completion": b'{"choices": [{"text": "x"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}',
    "completion no usage": b'{"choices": [{"text": "x"}]}',
    "delta": b'{"choices": [{"delta": {"content": "d"}, "text": "t"}]}',
    "responses": json.dumps({**response_object("incomplete", USAGE, [
        {"type": "reasoning", "summary": [{"text": "S"}], "content": [{"type": "reasoning_text", "text": "Hm"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Hello"}, {"refusal": " no"}, "x"]},
        {"type": "function_call", "id": "fc", "name": "f", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c", "name": "g", "input": "i"},
        {"type": "function_call", "name": "h"}])}).encode(),
    "responses failed": json.dumps({**response_object("failed"), "error": {"message": "engine died"}}).encode(),
    "responses failed silently": json.dumps(response_object("failed")).encode(),
    "responses no output": b'{"object": "response"}',
    "error": b'{"error": {"message": "boom"}}',
    "no choices": b'{"choices": []}',
    "choice not an object": b'{"choices": ["a"]}',
    "not an object": b"[1]",
    "not JSON": b"<html>",
    "not UTF-8": b'{"a": "\xff"}',
}


def _outcome(value: Outcome | str) -> dict | str:
    return value if isinstance(value, str) else dataclasses.asdict(value)


def stream_cases() -> dict[str, dict | str]:
    bodies = {name: body for name, (_, body) in STREAMS.items()} | RESPONSES_STREAMS
    return {f"{name} as {api} {'fast' if fast else 'dicts'}": _outcome(read_stream(body, by_lines(body), fast, api))
            for name, body in bodies.items() for api in APIS for fast in (True, False)}


def sync_cases() -> dict[str, dict | str]:
    return {f"{name} as {api}": _outcome(read_body(api_style(api), body)) for name, body in SYNC_BODIES.items() for api in APIS}


def current() -> dict:
    return {"bodies": body_cases(), "streams": stream_cases(), "sync": sync_cases()}


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


def test_request_bodies_are_byte_identical(golden):
    assert body_cases() == golden["bodies"]


def _same(now: dict, before: dict) -> None:
    assert now.keys() == before.keys()
    defaults = _outcome(Outcome())
    for name, value in now.items():
        if isinstance(value, dict) and isinstance(before[name], dict):  # new fields: at their defaults
            assert {k: v for k, v in value.items() if k in before[name]} == before[name], name
            assert {k: v for k, v in value.items() if k not in before[name]} == {
                k: defaults[k] for k in value if k not in before[name]}, name
        else:
            assert value == before[name], name


def test_stream_outcomes_are_unchanged(golden):
    _same(stream_cases(), golden["streams"])


def test_sync_outcomes_are_unchanged(golden):
    _same(sync_cases(), golden["sync"])


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(current(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
