"""A small incremental parser for Server-Sent Events as OpenAI-compatible servers send them.

Servers send ``data: {json}`` lines, each event closed by a blank line, and end
the stream with ``data: [DONE]``; the Responses API names each event on an
``event: response.output_text.delta`` line before its data and ends with
``response.completed`` instead. :class:`SSEDecoder` takes one line at a time
(so the caller can timestamp each line the moment the socket delivers it) and
returns the event (its name and data) once the event is complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Iterator

DONE_SENTINEL = "[DONE]"


class SSEFormatError(ValueError):
    """A stream that is not valid OpenAI-style SSE."""


@dataclass(frozen=True)
class SSEEvent:
    """One complete event: its ``data`` payload, its ``event`` name ('' when unnamed) and the decoded JSON."""

    data: str
    event: str = ""

    @property
    def is_done(self) -> bool:
        return self.data == DONE_SENTINEL

    def json(self) -> dict:
        """The payload decoded as a JSON object (raises :class:`SSEFormatError` if it is not)."""
        try:
            value = json.loads(self.data)
        except json.JSONDecodeError as exc:
            raise SSEFormatError(f"malformed SSE data (not JSON): {self.data[:120]!r}") from exc
        if not isinstance(value, dict):
            raise SSEFormatError(f"malformed SSE data (not a JSON object): {self.data[:120]!r}")
        return value


class SSEDecoder:
    """Feed lines with :meth:`feed`; it returns an :class:`SSEEvent` when one completes."""

    def __init__(self) -> None:
        self._data: list[str] = []
        self._event = ""

    def feed(self, line: bytes | str) -> SSEEvent | None:
        if isinstance(line, bytes):
            line = line.decode("utf-8")
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):  # comment / keep-alive
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # "id" and "retry" carry nothing the OpenAI protocol uses.
        return None

    def flush(self) -> SSEEvent | None:
        """The pending event at end of stream, if the last one was not closed by a blank line."""
        return self._dispatch()

    def _dispatch(self) -> SSEEvent | None:
        if not self._data:
            self._event = ""  # an event without data is not dispatched (the SSE standard)
            return None
        event = SSEEvent("\n".join(self._data), self._event)
        self._data, self._event = [], ""
        return event


def iter_events(lines: Iterable[bytes | str]) -> Iterator[SSEEvent]:
    """All events of a stream of lines (including a final unterminated one)."""
    decoder = SSEDecoder()
    for line in lines:
        event = decoder.feed(line)
        if event is not None:
            yield event
    event = decoder.flush()
    if event is not None:
        yield event


def format_event(payload: dict | str, event: str = "") -> str:
    """Encode one event as the server sends it: ``event: <name>`` when named, ``data: <json>`` and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
