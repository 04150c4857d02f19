"""The Responses API (``POST /v1/responses``): ``input`` in, named events out (OpenAI's names, which vLLM uses too).

``response.output_text.delta`` (and ``refusal``), the reasoning deltas and the
tool-call argument deltas are output chunks; lifecycle events
(``response.created``, ``*.added``, ``*.done``) are not. ``response.completed``
(or ``response.incomplete``: the output budget ran out, a normal end) ends the
stream with usage (``output_tokens``) and the server's per-request
``metrics`` where it sends them (both in its ``response``, the object a sync
body is); ``response.failed`` and ``error`` events are failures. There is no
running token count.
"""

from __future__ import annotations

import msgspec

from llmload.core.apis.base import APIStyle
from llmload.core.sse import SSEEvent
from llmload.core.wire import (Piece, ServerReported, StreamReader, Usage, WireError, error_detail, read_usage,
                               text_of)

#: Stream events by what they carry.
REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
ANSWER = frozenset({"response.output_text.delta", "response.refusal.delta"})
TOOL = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})
#: The events that end a stream well (``incomplete``: the output budget ran out, a normal end).
END = frozenset({"response.completed", "response.incomplete"})
_DELTAS = REASONING | ANSWER | TOOL


class _Delta(msgspec.Struct, gc=False):
    """A stream event carrying generated text."""

    type: str | None = None
    delta: str | None = None
    item_id: str | int | None = None


_DELTA = msgspec.json.Decoder(_Delta)


def responses_input(messages: list[dict] | tuple[dict, ...]) -> str | list[dict]:
    """A Responses ``input``: the text of a lone user message, else the messages (role and content) in order."""
    if len(messages) == 1 and messages[0].get("role") == "user" and isinstance(messages[0].get("content"), str):
        return messages[0]["content"]
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def output_piece(output: object) -> Piece | None:
    """What a Responses ``output`` list holds: message text, reasoning text, tool calls (None: not a list)."""
    if not isinstance(output, list):
        return None
    piece = Piece()
    tools = []
    for item in (i for i in output if isinstance(i, dict)):
        kind = item.get("type")
        parts = item.get("content") if isinstance(item.get("content"), list) else []
        if kind == "message":
            piece.answer += "".join(text_of(p.get("text")) or text_of(p.get("refusal")) for p in parts
                                    if isinstance(p, dict))
        elif kind == "reasoning":
            summary = item.get("summary") if isinstance(item.get("summary"), list) else []
            piece.reasoning += "".join(text_of(p.get("text")) for p in parts + summary if isinstance(p, dict))
        elif kind in ("function_call", "custom_tool_call"):
            piece.tool += text_of(item.get("name")) + text_of(item.get("arguments") or item.get("input"))
            tools.append(item.get("id") or item.get("call_id") or len(tools))
    piece.tool_ids = tuple(tools)
    return piece


class Responses(APIStyle):
    """The messages as ``input`` (a lone user message as its text), ``max_output_tokens``, ``store: false``."""

    name = "responses"
    path = "/v1/responses"
    stream_end = "response.completed"
    budget_field = "max_output_tokens"

    def prompt_fields(self, record, history) -> dict:
        return {"input": responses_input(history)}

    def options(self, params) -> dict:
        return {"store": False}  # nothing to keep: a server that stores responses would grow over a long run

    def read_fast(self, reader: StreamReader, event: SSEEvent, offset: float) -> bool:
        if event.event and event.event not in _DELTAS:
            return False  # a lifecycle or end event: few per response
        try:
            delta = _DELTA.decode(event.raw)
        except msgspec.DecodeError:
            return False
        kind = delta.type or event.event
        text = delta.delta or ""
        if kind in ANSWER:
            reader.record(offset, text, "", "", ())
        elif kind in REASONING:
            reader.record(offset, "", text, "", ())
        elif kind in TOOL:
            reader.record(offset, "", "", text, (delta.item_id,))
        else:
            return False
        return True

    def read_event(self, reader: StreamReader, chunk: dict, event: SSEEvent, offset: float) -> None:
        kind = chunk.get("type") or event.event
        if kind in REASONING:
            reader.take(Piece(reasoning=text_of(chunk.get("delta"))), offset)
        elif kind in ANSWER:
            reader.take(Piece(answer=text_of(chunk.get("delta"))), offset)
        elif kind in TOOL:
            reader.take(Piece(tool=text_of(chunk.get("delta")), tool_ids=(chunk.get("item_id"),)), offset)
        elif kind in END:
            response = chunk.get("response") if isinstance(chunk.get("response"), dict) else {}
            reader.usage = read_usage(response.get("usage")) or Usage()
            reader.take_timing(response.get("metrics"))
            reader.done = True
        elif kind == "response.failed":
            response = chunk.get("response") if isinstance(chunk.get("response"), dict) else {}
            raise ServerReported(f"response.failed: {error_detail(response.get('error') or response)}")
        elif kind == "error" or chunk.get("error"):
            raise ServerReported(f"error event in the stream: {error_detail(chunk)}")
        # response.created, response.in_progress, *.added, *.done: lifecycle events, no tokens

    def body_piece(self, payload: dict) -> Piece:
        if payload.get("status") == "failed":
            raise ServerReported("response failed (status failed, no error given)")
        piece = output_piece(payload.get("output"))
        if piece is None:
            raise WireError("malformed JSON body: no output list")
        return piece
