"""What chat and completion streams share: chunks with a ``choices`` list and ``usage``, ended by ``[DONE]``.

A chunk's first choice carries the output (each style says how:
:meth:`ChoicesStyle.choice_piece`, and on the fast path
:meth:`ChoicesStyle.take_choice`); ``usage`` (asked for with
``stream_options.include_usage``) carries the counts, and with
``continuous_usage_stats`` (vLLM's; the basic server's too) it rides on every
chunk with the running ``completion_tokens``. The final usage chunk
(``choices: []``) carries the server's per-request ``metrics`` where it sends
them. ``data: {"error": ...}`` and a chunk without a ``choices`` list are
failures.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from llmload.core.apis.base import APIStyle
from llmload.core.sse import SSEEvent
from llmload.core.wire import (Piece, ServerReported, StreamReader, Usage, WireError, error_detail,
                               read_usage)


# The fields the rules read, with the types they accept; a chunk that does not fit is read from its dict.
# One chunk shape for both styles: a field of the other style's of the wrong type sends the chunk to the dict too.


class _Function(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct, gc=False):
    index: int | UnsetType = UNSET
    function: _Function | None = None


class _Message(msgspec.Struct, gc=False):
    """A chat ``delta`` or ``message``."""

    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None


class TypedChoice(msgspec.Struct, gc=False):
    """A choice of either style: chat's ``delta`` (``message`` when whole), completion's ``text``."""

    delta: _Message | None | UnsetType = UNSET
    message: _Message | None = None
    text: str | None = None


class _Details(msgspec.Struct, gc=False):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    completion_tokens_details: _Details | None = None
    reasoning_tokens: int | None = None
    output_tokens: Any = UNSET  # the Responses API's names: read by read_usage


class _Chunk(msgspec.Struct, gc=False):
    """A chat or completion stream chunk."""

    choices: list[TypedChoice] | UnsetType = UNSET
    usage: _Usage | None = None
    error: Any = UNSET
    metrics: Any = UNSET  # the server's per-request timing (the final usage chunk's): read by read_server_timing


_CHUNK = msgspec.json.Decoder(_Chunk)


class ChoicesStyle(APIStyle):
    """A style whose stream chunks hold ``choices`` and ``usage`` and whose stream ends with ``data: [DONE]``; a
    subclass reads a choice, typed (:meth:`take_choice`) and as a dict (:meth:`choice_piece`)."""

    stream_end = "[DONE]"
    budget_field = "max_tokens"

    def options(self, params) -> dict:
        if not params.stream:
            return {}
        stream_options = {"include_usage": True}
        if params.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        return {"stream_options": stream_options}

    @abstractmethod
    def take_choice(self, reader: StreamReader, choice: TypedChoice, offset: float, running: int | None) -> None:
        """Record what a typed choice carries (``running``: the chunk's running token count)."""

    @abstractmethod
    def choice_piece(self, choice: dict) -> Piece:
        """What a choice (a dict) carries."""

    def read_fast(self, reader: StreamReader, event: SSEEvent, offset: float) -> bool:
        try:
            chunk = _CHUNK.decode(event.raw)
        except msgspec.DecodeError:  # not JSON, or a field of another type (ValidationError)
            return False
        usage = chunk.usage
        if chunk.error is not UNSET or chunk.choices is UNSET or (usage is not None
                                                                  and usage.output_tokens is not UNSET):
            return False
        running = None
        if usage is not None:
            running = usage.completion_tokens
            if running is not None:
                details = usage.completion_tokens_details
                reasoning = details.reasoning_tokens if details is not None else None
                reader.usage = Usage(running, usage.prompt_tokens,
                                     usage.reasoning_tokens if reasoning is None else reasoning)
        if chunk.metrics is not UNSET:
            reader.take_timing(chunk.metrics)
        if chunk.choices:
            self.take_choice(reader, chunk.choices[0], offset, running)
        return True

    def read_event(self, reader: StreamReader, chunk: dict, event: SSEEvent, offset: float) -> None:
        if "error" in chunk:
            raise ServerReported(f"error event in the stream: {error_detail(chunk)}")
        usage = read_usage(chunk.get("usage"))
        if usage is not None and usage.output is not None:
            reader.usage = usage
        if "metrics" in chunk:
            reader.take_timing(chunk["metrics"])
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise WireError(f"malformed SSE: chunk without a choices list: {event.data[:120]!r}")
        if choices:
            if not isinstance(choices[0], dict):
                raise WireError(f"malformed SSE: choice is not an object: {event.data[:120]!r}")
            reader.take(self.choice_piece(choices[0]), offset, usage.output if usage else None)

    def body_piece(self, payload: dict) -> Piece:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise WireError("malformed JSON body: no choices")
        return self.choice_piece(choices[0])

