"""The Chat Completions API (``POST /v1/chat/completions``): messages in, a ``delta`` (a ``message`` when whole) out.

A delta carries answer text (``content``), reasoning (``reasoning_content``,
vLLM's name before November 2025, or ``reasoning``) and tool calls
(``tool_calls``: each call's function name and argument text, told apart by
``index``); vLLM's role-only first chunk carries none of them and is not an
output chunk.
"""

from __future__ import annotations

from msgspec import UNSET

from llmload.core.apis.choices import ChoicesStyle, TypedChoice
from llmload.core.wire import Piece, text_of


def message_piece(holder: object) -> Piece:
    """What a chat ``delta`` or ``message`` carries: content, reasoning under either name, tool calls."""
    if not isinstance(holder, dict):
        return Piece()
    piece = Piece(answer=text_of(holder.get("content")),
                  reasoning=text_of(holder.get("reasoning_content")) or text_of(holder.get("reasoning")))
    calls = holder.get("tool_calls")
    if isinstance(calls, list):
        ids = []
        for position, call in enumerate(c for c in calls if isinstance(c, dict)):
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            piece.tool += text_of(function.get("name")) + text_of(function.get("arguments"))
            ids.append(call.get("index", position))
        piece.tool_ids = tuple(ids)
    return piece


class Chat(ChoicesStyle):
    """The record's (or the conversation's) messages as ``messages``."""

    name = "chat"
    path = "/v1/chat/completions"

    def prompt_fields(self, record, history) -> dict:
        return {"messages": [dict(m) for m in history]}

    def take_choice(self, reader, choice: TypedChoice, offset: float, running: int | None) -> None:
        holder = choice.delta if choice.delta is not UNSET else choice.message
        if holder is not None:
            tool, ids = "", ()
            if holder.tool_calls:
                tool = "".join((c.function.name or "") + (c.function.arguments or "")
                               for c in holder.tool_calls if c.function is not None)
                ids = tuple(position if c.index is UNSET else c.index
                            for position, c in enumerate(holder.tool_calls))
            reader.record(offset, holder.content or "", holder.reasoning_content or holder.reasoning or "",
                          tool, ids, running)

    def choice_piece(self, choice: dict) -> Piece:
        return message_piece(choice.get("delta") if "delta" in choice else choice.get("message"))
