"""A small incremental parser for Server-Sent Events as OpenAI-compatible servers send them.

Servers send ``data: {json}`` lines, each event closed by a blank line, and end
the stream with ``data: [DONE]``; the Responses API names each event on an
``event: response.output_text.delta`` line before its data and ends with
``response.completed`` instead. :class:`SSEDecoder` takes the stream in pieces
as the socket delivers them (one line, several, or part of one: a line split
across two reads is joined) and returns the events each piece completes, so
the caller stamps a piece once, when it was read. Payloads stay bytes until
someone asks for their text or JSON.
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator, NamedTuple

DONE_SENTINEL = "[DONE]"
DONE = DONE_SENTINEL.encode()


class SSEFormatError(ValueError):
    """A stream that is not valid OpenAI-style SSE."""


class SSEEvent(NamedTuple):
    """One complete event: its ``data`` payload as sent (bytes) and its ``event`` name ('' when unnamed)."""

    raw: bytes
    event: str = ""

    @property
    def data(self) -> str:
        """The payload as text (raises :class:`SSEFormatError` if it is not UTF-8)."""
        try:
            return self.raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEFormatError(f"malformed SSE: line is not UTF-8 ({exc.reason})") from None

    @property
    def is_done(self) -> bool:
        return self.raw == DONE

    def json(self) -> dict:
        """The payload decoded as a JSON object (raises :class:`SSEFormatError` if it is not)."""
        text = self.data
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SSEFormatError(f"malformed SSE data (not JSON): {text[:120]!r}") from exc
        if not isinstance(value, dict):
            raise SSEFormatError(f"malformed SSE data (not a JSON object): {text[:120]!r}")
        return value


class SSEDecoder:
    """Give it the stream piece by piece with :meth:`push`; it returns the events each piece completes."""

    def __init__(self) -> None:
        self._tail = b""  # the start of a line whose end has not arrived yet
        self._data: list[bytes] = []
        self._event = ""

    def push(self, piece: bytes | str) -> list[SSEEvent]:
        """The events completed by ``piece`` (any part of the stream: lines end with ``\\n``)."""
        if isinstance(piece, str):
            piece = piece.encode("utf-8")
        if self._tail:
            piece = self._tail + piece
        lines = piece.split(b"\n")
        self._tail = lines.pop()
        return self._lines(lines)

    def feed(self, line: bytes | str) -> SSEEvent | None:
        """One line (with or without its ``\\n``); the event it completes, if any."""
        events = self.push(line)
        return events[-1] if events else None

    def flush(self) -> SSEEvent | None:
        """The pending event at end of stream, if the last one was not closed by a blank line."""
        tail, self._tail = self._tail, b""
        events = self._lines([tail, b""] if tail else [b""])  # the end of the stream ends the event
        return events[0] if events else None

    def _lines(self, lines: list[bytes]) -> list[SSEEvent]:
        events = []
        data = self._data
        for line in lines:
            if line.startswith(b"data: "):  # nearly every line: taken without splitting it up
                data.append(line[6:].rstrip(b"\r") if line.endswith(b"\r") else line[6:])
                continue
            if not line or not line.rstrip(b"\r"):  # a blank line ends the event
                if data:
                    events.append(SSEEvent(data[0] if len(data) == 1 else b"\n".join(data), self._event))
                    data.clear()
                self._event = ""  # an event without data is not dispatched (the SSE standard)
                continue
            line = line.rstrip(b"\r")
            if line.startswith(b":"):  # comment / keep-alive
                continue
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8")
            # "id" and "retry" carry nothing the OpenAI protocol uses.
        return events


def iter_events(pieces: Iterable[bytes | str]) -> Iterator[SSEEvent]:
    """All events of a stream given in pieces (lines, or any cut; a final unterminated event too)."""
    decoder = SSEDecoder()
    for piece in pieces:
        yield from decoder.push(piece)
    event = decoder.flush()
    if event is not None:
        yield event


def format_event(payload: dict | str, event: str = "") -> str:
    """Encode one event as the server sends it: ``event: <name>`` when named, ``data: <json>`` and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
