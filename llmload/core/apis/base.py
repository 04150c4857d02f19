"""What an API style's handler provides: its URL path, its request body, its stream events and its sync body.

The style-free work (the SSE parser, the output chunks' bookkeeping, usage,
outcomes, HTTP errors) is :mod:`llmload.core.wire`'s; a handler says only what
differs between styles. :class:`llmload.core.wire.StreamReader` calls
:meth:`APIStyle.read_fast` for every event (the typed msgspec path; False
hands the event to the whole-dict path) and :meth:`APIStyle.read_event` with
the event's dict otherwise; both record what the event carries on the reader
(``reader.record`` / ``reader.take`` for an output chunk, ``reader.usage``,
``reader.done`` at the style's own end event) and raise
:class:`llmload.core.wire.WireError` for an error event or a malformed one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from llmload.core.records import PromptRecord
from llmload.core.sse import SSEEvent
from llmload.core.wire import Piece, StreamReader

if TYPE_CHECKING:  # pragma: no cover
    from llmload.core.apis import GenerationParams


class APIStyle(ABC):
    """One API style (one endpoint's request and response shapes); one instance in the registry."""

    #: The style's name: ``--api``'s value and the raw log's ``api``.
    name: str
    #: The URL path its requests go to.
    path: str
    #: What ends its stream well, as "stream ended without ..." names it when it is missing.
    stream_end: str
    #: The request body's field of the output budget.
    budget_field: str

    @abstractmethod
    def prompt_fields(self, record: PromptRecord, history: list[dict] | tuple[dict, ...]) -> dict:
        """The request body's fields that carry the prompt (``history``: the messages to send)."""

    def options(self, params: GenerationParams) -> dict:
        """The request body's fields after ``stream`` (a style's own options); none by default."""
        return {}

    def build_body(self, record: PromptRecord, params: GenerationParams, model: str,
                   messages: list[dict] | None = None) -> dict:
        """The JSON body of one request for ``record`` in ``params``' mode (``messages``: a conversation's
        history so far, in place of the record's own): the model, the prompt, the budget, the temperature,
        ``stream``, the style's options and ``ignore_eos`` (vLLM's and the basic server's extension)."""
        body: dict = {"model": model}
        body.update(self.prompt_fields(record, messages if messages is not None else record.messages))
        body[self.budget_field] = params.max_tokens or record.max_tokens
        body["temperature"] = params.temperature
        body["stream"] = params.stream
        body.update(self.options(params))
        if params.ignore_eos:
            body["ignore_eos"] = True
        return body

    def read_fast(self, reader: StreamReader, event: SSEEvent, offset: float) -> bool:
        """Read a regular event through typed structs; False: read it from its whole dict instead (the
        default: a style without a fast path)."""
        return False

    @abstractmethod
    def read_event(self, reader: StreamReader, chunk: dict, event: SSEEvent, offset: float) -> None:
        """Read an event from its whole dict (``chunk``: its JSON object), by the same rules as the fast path."""

    @abstractmethod
    def body_piece(self, payload: dict) -> Piece:
        """What a sync response body (a JSON object without an error) carries; WireError when it is not of the
        style's shape."""
