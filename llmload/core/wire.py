"""The wire format's style-free part: responses turned into raw measurements, whatever the API style.

No sockets and no Locust here, and nothing that differs between API styles:
each style (its URL path, request body, stream events, what ends its stream,
its sync body) is a handler in :mod:`llmload.core.apis`. A streamed response
is fed as it arrives (whole socket reads, or lines) with each piece's arrival
time (seconds from the request's start) to a :class:`StreamReader` made with
the style's handler; a sync response's body goes to :func:`read_body`. Both
give an :class:`Outcome`: the raw fields of a
:class:`llmload.core.metrics.RequestResult` (output-chunk arrival times, token
counts and, for a failed request, a one-line error). Nothing is derived here:
every metric comes from :mod:`llmload.core.metrics`.

Rules (the same for every server and style):

* an *output chunk* is an event that carries generated tokens of any kind
  (answer text, reasoning, a tool call: each style's handler says where they
  are); role-only chunks, usage chunks and lifecycle events are not;
* output tokens come from the server's usage (:func:`read_usage`: chat and
  completion names, or the Responses API's); without it, or when it says 0
  beside generated text (flagged ``usage_zero``), the output chunks are
  counted (source ``"chunks"``);
* tokens per chunk: where a style's chunks carry the server's running count
  (continuous usage), each chunk's own count comes from it (source
  ``"usage"``); a server without it leaves the count to the client's
  tokenizer (``"tokenizer"``, :class:`llmload.core.client.LLMClient`) or to
  none (``"chunks"``: ITL per chunk, flagged ``itl_per_chunk`` when usage
  shows chunks of several tokens);
* per event, a handler's fast path decodes the common shapes with msgspec into
  typed structs that hold only what these rules read; anything else (an
  error, an unexpected type, a field missing, not JSON) is decoded whole and
  read by the same rules from the dict, which gives every failure its one-line
  message;
* per-request timing measured by the server (vLLM's ``metrics`` object with
  ``--enable-per-request-metrics``; the basic server's always): at the top of
  a sync body, in the stream's final usage chunk (chat, completion) or in the
  end event's ``response`` (Responses); its numeric fields, in ms as the
  server named them, go to the outcome's ``server_timing``
  (:func:`read_server_timing`); one that is not an object or holds a value
  that is not a finite number >= 0 is dropped and flagged
  ``server_timing_malformed``, never a failure;
* error events inside an HTTP 200 stream, a chunk that is not JSON or not of
  its style's shape, and a stream that ends without its style's end
  (``data: [DONE]`` ends every stream) are failures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

import msgspec

from llmload.core.sse import DONE, SSEDecoder, SSEEvent, SSEFormatError

if TYPE_CHECKING:  # pragma: no cover
    from llmload.core.apis.base import APIStyle

MODELS_PATH = "/v1/models"

#: Flag of a response whose ``usage`` says 0 completion tokens although it carried generated text.
USAGE_ZERO = "usage_zero"
#: Flag of a stream whose chunks carry several tokens while their counts are unknown (its ITL is per chunk).
ITL_PER_CHUNK = "itl_per_chunk"
#: Flag of a response whose per-request timing (``metrics``) was malformed: dropped, the request not failed.
SERVER_TIMING_MALFORMED = "server_timing_malformed"


#: Flag of a failed request whose 200 answer carried the server's own error (an error event, a failed response).
SERVER_REPORTED = "server_reported"


class WireError(ValueError):
    """A response that breaks the protocol or reports an error (the message is one line)."""


class ServerReported(WireError):
    """An answer that carries the server's own error (an error event, ``response.failed``): it failed, rather than
    broke the protocol (flagged :data:`SERVER_REPORTED`)."""


def encode_body(body: dict) -> bytes:
    """``body`` as compact UTF-8 JSON bytes, ready to send."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_detail(payload: object) -> str:
    """The human message inside an OpenAI-style error payload (``{"error": {"message": ..}}``)."""
    if isinstance(payload, dict):
        inner = payload.get("error", payload)
        if isinstance(inner, dict):
            for key in ("message", "detail", "msg"):
                if inner.get(key):
                    return _one_line(inner[key])
            return _one_line(json.dumps(inner, ensure_ascii=False))
        if isinstance(inner, str) and inner:
            return _one_line(inner)
        if "detail" in payload:
            return _one_line(str(payload["detail"]))
    return _one_line(json.dumps(payload, ensure_ascii=False) if not isinstance(payload, str) else payload)


#: What web frameworks answer for a path they do not route (FastAPI/Starlette, vLLM, nginx, Go's net/http).
_NO_ROUTE = ("not found", "404 not found", "404 page not found", "404: not found")


def http_error_message(status: int, body: bytes, path: str = "") -> str:
    """One line for a non-2xx answer: ``HTTP 404: The model `x` does not exist.``.

    A 404 whose body says no more than "Not Found" is a server without ``path``:
    ``HTTP 404: the server has no /v1/responses (Not Found)``.
    """
    text = body.decode("utf-8", errors="replace").strip()
    try:
        detail = error_detail(json.loads(text)) if text else ""
    except json.JSONDecodeError:
        detail = _one_line(text, 200)
    if status == 404 and path and (detail.lower().rstrip(".") in _NO_ROUTE or not detail
                                   or detail.lower().startswith("<")):
        return f"HTTP 404: the server has no {path} ({detail if detail and detail[0] != '<' else 'Not Found'})"
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status} (empty body)"


# --------------------------------------------------------------------------- what one chunk carries


@dataclass
class Piece:
    """The generated output one chunk (or a whole sync answer) carries, by kind."""

    answer: str = ""
    reasoning: str = ""
    tool: str = ""  # a tool call's name and argument text
    tool_ids: tuple = ()  # the tool calls it belongs to (index or item id)

    @property
    def text(self) -> str:
        return self.reasoning + self.answer + self.tool


def text_of(value: object) -> str:
    """``value`` if it is a string, else '' (a field of generated text that may be missing or null)."""
    return value if isinstance(value, str) else ""


class Usage(msgspec.Struct, gc=False):
    """A usage object's counts (None where absent), in either API's names (a struct: made for every chunk of a
    stream with running counts, at a fifth of a NamedTuple's cost)."""

    output: int | None = None
    prompt: int | None = None
    reasoning: int | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_usage(usage: object) -> Usage | None:
    """The counts of a chat/completion usage (``completion_tokens``) or a Responses one (``output_tokens``)."""
    if not isinstance(usage, dict):
        return None
    responses = "output_tokens" in usage
    details = usage.get("output_tokens_details" if responses else "completion_tokens_details")
    reasoning = _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None
    if reasoning is None:
        reasoning = _int(usage.get("reasoning_tokens"))  # some servers put it beside the totals
    return Usage(output=_int(usage.get("output_tokens" if responses else "completion_tokens")),
                 prompt=_int(usage.get("input_tokens" if responses else "prompt_tokens")), reasoning=reasoning)


def read_server_timing(metrics: object) -> tuple[dict[str, float] | None, bool]:
    """A ``metrics`` object's numeric fields, keyed as the server named them (None: absent, null, or no numeric
    field), and whether it was malformed (not an object, or a value that is not a finite number >= 0; then
    None). A null field was not measured and a nested object (vLLM's ``speculative_decoding``) is not a timing:
    both are left out."""
    if metrics is None:
        return None, False
    if not isinstance(metrics, dict):
        return None, True
    timing = {}
    for key, value in metrics.items():
        if value is None or isinstance(value, dict):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            return None, True
        timing[key] = value
    return timing or None, False


# --------------------------------------------------------------------------- outcomes


@dataclass
class Outcome:
    """Raw fields of one response (everything a RequestResult holds besides its identity)."""

    token_offsets: list[float] = field(default_factory=list)
    first_output_offset: float | None = None
    output_tokens: int | None = None
    output_tokens_source: str = "none"
    prompt_tokens: int | None = None
    reasoning_tokens: int | None = None
    output_chars: int = 0
    output_text: str = ""
    reasoning_text: str = ""
    tool_calls: int = 0
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_tokens_source: str = "none"
    chunk_texts: list[str] = field(default_factory=list)  # each output chunk's text (for a tokenizer; not logged)
    flags: list[str] = field(default_factory=list)
    error: str = ""
    server_timing: dict[str, float] | None = None  # the server's per-request timing (read_server_timing)

    @property
    def success(self) -> bool:
        return not self.error

    def count_chunks(self, counts: list[int]) -> None:
        """Take each chunk's token count from the client's tokenizer (where the server gave none)."""
        self.chunk_tokens, self.chunk_tokens_source = list(counts), "tokenizer"
        if ITL_PER_CHUNK in self.flags:
            self.flags.remove(ITL_PER_CHUNK)


def output_token_count(usage_tokens: int | None, chunks: int, flags: list[str]) -> tuple[int, str]:
    """(output tokens, source) of a stream: the server's usage, or the output chunks counted where usage is
    missing or says 0 beside generated text (then flagged :data:`USAGE_ZERO` in ``flags``)."""
    if usage_tokens is not None and (usage_tokens > 0 or chunks == 0):
        return usage_tokens, "usage"
    if usage_tokens == 0:
        flags.append(USAGE_ZERO)
    return chunks, "chunks"


class StreamReader:
    """Interprets one SSE response of an API style: feed the body as it arrives with its arrival offsets, then take
    :meth:`outcome`.

    :meth:`feed` returns True once the stream's end has arrived (``data: [DONE]``, or the end event of the
    style) and raises :class:`WireError` for an error event or a malformed chunk. What each event carries is the
    style's handler's to say (:class:`llmload.core.apis.base.APIStyle`): it calls :meth:`record` (or
    :meth:`take`) for each output chunk, sets :attr:`usage`, passes the server's ``metrics`` object to
    :meth:`take_timing`, and sets :attr:`done` at its own end event.
    ``fast=False`` reads every event from its whole dict (the fast path's reference, for the tests).
    """

    def __init__(self, style: APIStyle, fast: bool = True):
        self.style = style
        self.fast = fast
        self._read_fast = style.read_fast if fast else None  # looked up once: called for every event
        self._read_event = style.read_event
        self.decoder = SSEDecoder()
        self.token_offsets: list[float] = []
        self.first_output: float | None = None
        self.answer: list[str] = []
        self.reasoning: list[str] = []
        self.texts: list[str] = []
        self.running: list[int | None] = []  # the server's running token count at each output chunk
        self.tools: set = set()
        self.events = 0
        self.done = False
        self.usage = Usage()
        self.server_timing: dict[str, float] | None = None
        self.timing_malformed = False
        self._last_offset = 0.0

    def feed(self, data: bytes | str, offset: float) -> bool:
        """Take a piece of the body (a line, several, or part of one) received ``offset`` s after the start."""
        self._last_offset = offset
        try:
            events = self.decoder.push(data)
        except UnicodeDecodeError as exc:
            raise WireError(f"malformed SSE: line is not UTF-8 ({exc.reason})") from None
        for event in events:
            if self.done:
                break  # nothing after the end counts
            self._event(event, offset)
        return self.done

    def end(self) -> bool:
        """The body ended: take a last event not closed by a blank line; True when the end was seen."""
        try:
            event = self.decoder.flush()
        except UnicodeDecodeError as exc:
            raise WireError(f"malformed SSE: line is not UTF-8 ({exc.reason})") from None
        if event is not None and not self.done:
            self._event(event, self._last_offset)
        return self.done

    def _event(self, event: SSEEvent, offset: float) -> None:
        self.events += 1
        if event.raw == DONE:
            self.done = True
            return
        read_fast = self._read_fast
        if read_fast is not None and read_fast(self, event, offset):
            return
        try:
            chunk = event.json()
        except SSEFormatError as exc:  # "malformed SSE data (not JSON): ..."
            raise WireError(str(exc)) from None
        self._read_event(self, chunk, event, offset)

    def take_timing(self, metrics: object) -> None:
        """Keep the server's per-request timing (a ``metrics`` object; the last one a stream sends counts)."""
        self.server_timing, self.timing_malformed = read_server_timing(metrics)

    def take(self, piece: Piece, offset: float, running: int | None = None) -> None:
        """Record what ``piece`` carries as an output chunk (see :meth:`record`)."""
        self.record(offset, piece.answer, piece.reasoning, piece.tool, piece.tool_ids, running)

    def record(self, offset: float, answer: str, reasoning: str, tool: str, tool_ids: tuple,
               running: int | None = None) -> None:
        """Record an output chunk that arrived at ``offset`` (a chunk that carries no generated text is not one);
        ``running``: the server's running output token count with it, where it sent one."""
        text = reasoning + answer + tool  # Piece.text
        if not text:
            return
        self.token_offsets.append(offset)
        self.texts.append(text)
        self.running.append(running)
        if answer:
            self.answer.append(answer)
            if self.first_output is None:
                self.first_output = offset
        elif tool and self.first_output is None:
            self.first_output = offset
        if reasoning:
            self.reasoning.append(reasoning)
        if tool_ids:
            self.tools.update(tool_ids)

    def chunk_tokens(self) -> list[int] | None:
        """Tokens per output chunk from the server's running counts (None unless every chunk had one)."""
        running = self.running
        if not running or None in running:
            return None
        before = accumulate(running, max, initial=0)  # the highest count so far, before each chunk
        return [max(count - highest, 0) for count, highest in zip(running, before)]

    def outcome(self) -> Outcome:
        """What the stream delivered; an error when it ended without its end event."""
        output_text = "".join(self.answer)
        result = Outcome(token_offsets=list(self.token_offsets), first_output_offset=self.first_output,
                         prompt_tokens=self.usage.prompt, reasoning_tokens=self.usage.reasoning,
                         output_chars=len(output_text), output_text=output_text,
                         reasoning_text="".join(self.reasoning), tool_calls=len(self.tools),
                         chunk_texts=list(self.texts), server_timing=self.server_timing)
        result.output_tokens, result.output_tokens_source = output_token_count(
            self.usage.output, len(self.token_offsets), result.flags)
        counts = self.chunk_tokens()
        if counts is not None:
            result.chunk_tokens, result.chunk_tokens_source = counts, "usage"
        elif self.token_offsets:
            result.chunk_tokens_source = "chunks"
            # one token more than chunks is the end-of-sequence token, counted but sent without text
            if result.output_tokens_source == "usage" and result.output_tokens > len(self.token_offsets) + 1:
                result.flags.append(ITL_PER_CHUNK)
        if self.timing_malformed:
            result.flags.append(SERVER_TIMING_MALFORMED)
        if not self.done:
            result.error = (f"stream ended without {self.style.stream_end}" if self.events
                            else "stream ended without any SSE event")
        return result


def read_body(style: APIStyle, body: bytes) -> Outcome:
    """Interpret a complete (sync) JSON response body of ``style``; the Outcome's error says what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Outcome(error=f"malformed JSON body ({exc.__class__.__name__}): {_one_line(repr(body[:120]))}")
    if not isinstance(payload, dict):
        return Outcome(error="malformed JSON body: not an object")
    if payload.get("error"):  # a Responses body carries "error": null
        return Outcome(error=f"error in the response body: {error_detail(payload)}", flags=[SERVER_REPORTED])
    try:
        piece = style.body_piece(payload)
    except WireError as exc:
        return Outcome(error=str(exc), flags=[SERVER_REPORTED] if isinstance(exc, ServerReported) else [])
    usage = read_usage(payload.get("usage")) or Usage()
    flags: list[str] = []
    if usage.output is None:
        source = "none"
    elif usage.output == 0 and piece.text:
        source = "none"
        flags.append(USAGE_ZERO)
    else:
        source = "usage"
    timing, malformed = read_server_timing(payload.get("metrics"))
    if malformed:
        flags.append(SERVER_TIMING_MALFORMED)
    return Outcome(output_tokens=usage.output, output_tokens_source=source, prompt_tokens=usage.prompt,
                   reasoning_tokens=usage.reasoning, output_chars=len(piece.answer), output_text=piece.answer,
                   reasoning_text=piece.reasoning, tool_calls=len(piece.tool_ids), flags=flags,
                   server_timing=timing)


def first_model_id(body: bytes) -> str:
    """The first model id of a ``/v1/models`` answer (:class:`WireError` if there is none)."""
    try:
        payload = json.loads(body.decode("utf-8"))
        model = payload["data"][0]["id"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, IndexError, TypeError):
        raise WireError(f"{MODELS_PATH} lists no model: {_one_line(repr(body[:120]))}") from None
    if not isinstance(model, str) or not model:
        raise WireError(f"{MODELS_PATH} lists a model without an id")
    return model
