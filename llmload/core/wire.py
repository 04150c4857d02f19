"""The OpenAI wire format: request bodies, and responses turned into raw measurements.

No sockets and no Locust here. A streamed response is fed as it arrives (whole
socket reads, or lines) with each piece's arrival time (seconds from the
request's start) to :class:`StreamReader`;
a sync response's body goes to :func:`read_body`. Both give a :class:`Outcome`:
the raw fields of a :class:`llmload.core.metrics.RequestResult` (output-chunk
arrival times, token counts and, for a failed request, a one-line error).
Nothing is derived here: every metric comes from :mod:`llmload.core.metrics`.

Rules (the same for every server):

* an *output chunk* is an event that carries generated tokens of any kind:
  answer text (``choices[0].text``, ``delta.content``, Responses'
  ``response.output_text.delta``), reasoning (``delta.reasoning_content`` or
  ``delta.reasoning``, ``response.reasoning_text.delta``) or a tool call
  (``delta.tool_calls``, ``response.function_call_arguments.delta``); vLLM's
  role-only first chat chunk, usage chunks and lifecycle events are not;
* output tokens come from the server's usage (``completion_tokens``, asked for
  with ``stream_options.include_usage``; Responses: ``response.completed``'s
  ``output_tokens``); without it, or when it says 0 beside generated text
  (flagged ``usage_zero``), the output chunks are counted (source ``"chunks"``);
* tokens per chunk: chat and completion streams ask for
  ``stream_options.continuous_usage_stats`` (vLLM's; the basic server's too), so
  each chunk's running ``completion_tokens`` gives its own count (source
  ``"usage"``); a server without it leaves the count to the client's tokenizer
  (``"tokenizer"``, :class:`llmload.core.client.LLMClient`) or to none
  (``"chunks"``: ITL per chunk, flagged ``itl_per_chunk`` when usage shows
  chunks of several tokens);
* per event, the common shapes (a chunk with ``choices`` and ``usage``, a
  Responses delta event) are decoded by msgspec into typed structs that hold
  only what these rules read; anything else (an error, an unexpected type, a
  field missing, not JSON) is decoded whole and read by the same rules from
  the dict, which gives every failure its one-line message;
* ``data: {"error": ...}`` inside an HTTP 200 stream, Responses' ``error`` and
  ``response.failed`` events, a chunk that is not JSON or has no ``choices``,
  and a stream that ends without ``data: [DONE]`` (Responses: without
  ``response.completed`` or ``response.incomplete``) are failures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from llmload.core.metrics import APIS, MODES
from llmload.core.records import PromptRecord
from llmload.core.sse import DONE, SSEDecoder, SSEEvent, SSEFormatError

#: URL path of each API style.
ENDPOINTS = {"completion": "/v1/completions", "chat": "/v1/chat/completions", "responses": "/v1/responses"}
MODELS_PATH = "/v1/models"

#: Responses API stream events by what they carry (OpenAI's names, which vLLM uses too).
RESPONSES_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
RESPONSES_ANSWER = frozenset({"response.output_text.delta", "response.refusal.delta"})
RESPONSES_TOOL = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})
#: The events that end a Responses stream well (``incomplete``: the output budget ran out, a normal end).
RESPONSES_END = frozenset({"response.completed", "response.incomplete"})
RESPONSES_FAILED = frozenset({"response.failed", "error"})

#: Flag of a response whose ``usage`` says 0 completion tokens although it carried generated text.
USAGE_ZERO = "usage_zero"
#: Flag of a stream whose chunks carry several tokens while their counts are unknown (its ITL is per chunk).
ITL_PER_CHUNK = "itl_per_chunk"


class WireError(ValueError):
    """A response that breaks the protocol or reports an error (the message is one line)."""


@dataclass(frozen=True)
class GenerationParams:
    """What every request of a run asks for (the prompt comes from the record)."""

    api: str = "chat"
    mode: str = "stream"
    max_tokens: int | None = None  # None: each record's own budget
    ignore_eos: bool = False
    temperature: float = 0.0
    continuous_usage: bool = True  # ask chat/completion streams for each chunk's running token count

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)} (got {self.api!r})")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {self.mode!r})")

    @property
    def path(self) -> str:
        return ENDPOINTS[self.api]

    @property
    def stream(self) -> bool:
        return self.mode == "stream"


def responses_input(messages: list[dict] | tuple[dict, ...]) -> str | list[dict]:
    """A Responses ``input``: the text of a lone user message, else the messages (role and content) in order."""
    if len(messages) == 1 and messages[0].get("role") == "user" and isinstance(messages[0].get("content"), str):
        return messages[0]["content"]
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def build_body(record: PromptRecord, params: GenerationParams, model: str,
               messages: list[dict] | None = None) -> dict:
    """The JSON body of one request for ``record`` in ``params``' API style and mode.

    ``messages`` replaces the record's own (a conversation's history so far).
    """
    body: dict = {"model": model}
    history = messages if messages is not None else record.messages
    budget = params.max_tokens or record.max_tokens
    if params.api == "responses":
        body["input"] = responses_input(history)
        body["max_output_tokens"] = budget
    else:
        if params.api == "chat":
            body["messages"] = [dict(m) for m in history]
        else:
            body["prompt"] = record.prompt
        body["max_tokens"] = budget
    body["temperature"] = params.temperature
    body["stream"] = params.stream
    if params.api == "responses":
        body["store"] = False  # nothing to keep: a server that stores responses would grow over a long run
    elif params.stream:
        body["stream_options"] = {"include_usage": True}
        if params.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if params.ignore_eos:
        body["ignore_eos"] = True  # vLLM's (and the basic server's) extension to the OpenAI API
    return body


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


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def message_piece(holder: object) -> Piece:
    """What a chat ``delta`` or ``message`` carries: content, reasoning under either name, tool calls."""
    if not isinstance(holder, dict):
        return Piece()
    piece = Piece(answer=_text(holder.get("content")),
                  reasoning=_text(holder.get("reasoning_content")) or _text(holder.get("reasoning")))
    calls = holder.get("tool_calls")
    if isinstance(calls, list):
        ids = []
        for position, call in enumerate(c for c in calls if isinstance(c, dict)):
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            piece.tool += _text(function.get("name")) + _text(function.get("arguments"))
            ids.append(call.get("index", position))
        piece.tool_ids = tuple(ids)
    return piece


def choice_piece(api: str, choice: dict) -> Piece:
    """What a choice carries, for either API (completions carry text only)."""
    if api == "chat":
        return message_piece(choice.get("delta") if "delta" in choice else choice.get("message"))
    return Piece(answer=_text(choice.get("text")))


def choice_text(api: str, choice: dict) -> str:
    """The answer text a choice carries ('' for none), for either API."""
    return choice_piece(api, choice).answer


class Usage(NamedTuple):
    """A usage object's counts (None where absent), in either API's names."""

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


# --------------------------------------------------------------------------- the fast path's types
# The fields the rules above read, with the types they accept. An event that does not fit (a wrong type, an
# error, Responses' usage names) fails to decode or is turned down, and is read from its whole dict instead.


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


class _Choice(msgspec.Struct, gc=False):
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

    choices: list[_Choice] | UnsetType = UNSET
    usage: _Usage | None = None
    error: Any = UNSET


class _ResponsesDelta(msgspec.Struct, gc=False):
    """A Responses stream event carrying generated text."""

    type: str | None = None
    delta: str | None = None
    item_id: str | int | None = None


_CHUNK = msgspec.json.Decoder(_Chunk)
_RESPONSES_DELTA = msgspec.json.Decoder(_ResponsesDelta)
_RESPONSES_DELTAS = RESPONSES_REASONING | RESPONSES_ANSWER | RESPONSES_TOOL


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
    """Interprets one SSE response: feed the body as it arrives with its arrival offsets, then take :meth:`outcome`.

    :meth:`feed` returns True once the stream's end has arrived (``data: [DONE]``;
    Responses: ``response.completed``) and raises :class:`WireError` for an error
    event or a malformed chunk. ``fast=False`` reads every event from its whole
    dict (the fast path's reference, for the tests).
    """

    def __init__(self, api: str, fast: bool = True):
        self.api = api
        self.fast = fast
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
        if self.fast and (self._responses_fast(event, offset) if self.api == "responses"
                          else self._choices_fast(event.raw, offset)):
            return
        try:
            chunk = event.json()
        except SSEFormatError as exc:  # "malformed SSE data (not JSON): ..."
            raise WireError(str(exc)) from None
        if self.api == "responses":
            self._responses_event(chunk.get("type") or event.event, chunk, offset)
        else:
            self._choices_chunk(chunk, event, offset)

    def _choices_fast(self, raw: bytes, offset: float) -> bool:
        """A regular chat/completion chunk read through the typed structs; False: read it from its dict."""
        try:
            chunk = _CHUNK.decode(raw)
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
                self.usage = Usage(running, usage.prompt_tokens,
                                   usage.reasoning_tokens if reasoning is None else reasoning)
        if chunk.choices:
            choice = chunk.choices[0]
            if self.api != "chat":
                if choice.text:
                    self._record(offset, choice.text, "", "", (), running)
                return True
            holder = choice.delta if choice.delta is not UNSET else choice.message
            if holder is not None:
                tool, ids = "", ()
                if holder.tool_calls:
                    tool = "".join((c.function.name or "") + (c.function.arguments or "")
                                   for c in holder.tool_calls if c.function is not None)
                    ids = tuple(position if c.index is UNSET else c.index
                                for position, c in enumerate(holder.tool_calls))
                self._record(offset, holder.content or "", holder.reasoning_content or holder.reasoning or "",
                             tool, ids, running)
        return True

    def _responses_fast(self, event: SSEEvent, offset: float) -> bool:
        """A Responses delta event read through its typed struct; False: read it from its dict."""
        if event.event and event.event not in _RESPONSES_DELTAS:
            return False  # a lifecycle or end event: few per response
        try:
            delta = _RESPONSES_DELTA.decode(event.raw)
        except msgspec.DecodeError:
            return False
        kind = delta.type or event.event
        text = delta.delta or ""
        if kind in RESPONSES_ANSWER:
            self._record(offset, text, "", "", ())
        elif kind in RESPONSES_REASONING:
            self._record(offset, "", text, "", ())
        elif kind in RESPONSES_TOOL:
            self._record(offset, "", "", text, (delta.item_id,))
        else:
            return False
        return True

    def _choices_chunk(self, chunk: dict, event: SSEEvent, offset: float) -> None:
        if "error" in chunk:
            raise WireError(f"error event in the stream: {error_detail(chunk)}")
        usage = read_usage(chunk.get("usage"))
        if usage is not None and usage.output is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise WireError(f"malformed SSE: chunk without a choices list: {event.data[:120]!r}")
        if choices:
            if not isinstance(choices[0], dict):
                raise WireError(f"malformed SSE: choice is not an object: {event.data[:120]!r}")
            self._take(choice_piece(self.api, choices[0]), offset, usage.output if usage else None)

    def _responses_event(self, kind: str, chunk: dict, offset: float) -> None:
        if kind in RESPONSES_REASONING:
            self._take(Piece(reasoning=_text(chunk.get("delta"))), offset)
        elif kind in RESPONSES_ANSWER:
            self._take(Piece(answer=_text(chunk.get("delta"))), offset)
        elif kind in RESPONSES_TOOL:
            self._take(Piece(tool=_text(chunk.get("delta")), tool_ids=(chunk.get("item_id"),)), offset)
        elif kind in RESPONSES_END:
            response = chunk.get("response") if isinstance(chunk.get("response"), dict) else {}
            self.usage = read_usage(response.get("usage")) or Usage()
            self.done = True
        elif kind == "response.failed":
            response = chunk.get("response") if isinstance(chunk.get("response"), dict) else {}
            raise WireError(f"response.failed: {error_detail(response.get('error') or response)}")
        elif kind == "error" or chunk.get("error"):
            raise WireError(f"error event in the stream: {error_detail(chunk)}")
        # response.created, response.in_progress, *.added, *.done: lifecycle events, no tokens

    def _take(self, piece: Piece, offset: float, running: int | None = None) -> None:
        self._record(offset, piece.answer, piece.reasoning, piece.tool, piece.tool_ids, running)

    def _record(self, offset: float, answer: str, reasoning: str, tool: str, tool_ids: tuple,
                running: int | None = None) -> None:
        """Record an output chunk (a chunk that carries no generated text is not one)."""
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
                         chunk_texts=list(self.texts))
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
        if not self.done:
            end = "response.completed" if self.api == "responses" else "[DONE]"
            result.error = f"stream ended without {end}" if self.events else "stream ended without any SSE event"
        return result


def read_body(api: str, body: bytes) -> Outcome:
    """Interpret a complete (sync) JSON response body; the Outcome's error says what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Outcome(error=f"malformed JSON body ({exc.__class__.__name__}): {_one_line(repr(body[:120]))}")
    if not isinstance(payload, dict):
        return Outcome(error="malformed JSON body: not an object")
    if payload.get("error"):  # a Responses body carries "error": null
        return Outcome(error=f"error in the response body: {error_detail(payload)}")
    if api == "responses":
        if payload.get("status") == "failed":
            return Outcome(error="response failed (status failed, no error given)")
        piece = responses_output_piece(payload.get("output"))
        if piece is None:
            return Outcome(error="malformed JSON body: no output list")
    else:
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Outcome(error="malformed JSON body: no choices")
        piece = choice_piece(api, choices[0])
    usage = read_usage(payload.get("usage")) or Usage()
    flags: list[str] = []
    if usage.output is None:
        source = "none"
    elif usage.output == 0 and piece.text:
        source = "none"
        flags.append(USAGE_ZERO)
    else:
        source = "usage"
    return Outcome(output_tokens=usage.output, output_tokens_source=source, prompt_tokens=usage.prompt,
                   reasoning_tokens=usage.reasoning, output_chars=len(piece.answer), output_text=piece.answer,
                   reasoning_text=piece.reasoning, tool_calls=len(piece.tool_ids), flags=flags)


def responses_output_piece(output: object) -> Piece | None:
    """What a Responses ``output`` list holds: message text, reasoning text, tool calls (None: not a list)."""
    if not isinstance(output, list):
        return None
    piece = Piece()
    tools = []
    for item in (i for i in output if isinstance(i, dict)):
        kind = item.get("type")
        parts = item.get("content") if isinstance(item.get("content"), list) else []
        if kind == "message":
            piece.answer += "".join(_text(p.get("text")) or _text(p.get("refusal")) for p in parts
                                    if isinstance(p, dict))
        elif kind == "reasoning":
            summary = item.get("summary") if isinstance(item.get("summary"), list) else []
            piece.reasoning += "".join(_text(p.get("text")) for p in parts + summary if isinstance(p, dict))
        elif kind in ("function_call", "custom_tool_call"):
            piece.tool += _text(item.get("name")) + _text(item.get("arguments") or item.get("input"))
            tools.append(item.get("id") or item.get("call_id") or len(tools))
    piece.tool_ids = tuple(tools)
    return piece


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
