"""The OpenAI wire format: request bodies, and responses turned into raw measurements.

No sockets and no Locust here. A streamed response is fed line by line with each
line's arrival time (seconds from the request's start) to :class:`StreamReader`;
a sync response's body goes to :func:`read_body`. Both give a :class:`Outcome`:
the raw fields of a :class:`llmload.core.metrics.RequestResult` (text-chunk arrival
times, token counts and, for a failed request, a one-line error). Nothing is
derived here: every metric comes from :mod:`llmload.core.metrics`.

Rules (the same for every server):

* a *token chunk* is an SSE event whose first choice carries non-empty text
  (``choices[0].text`` for completions, ``choices[0].delta.content`` for chat),
  so vLLM's role-only first chat chunk and the trailing usage chunk are not tokens;
* output tokens come from the server's ``usage.completion_tokens`` (asked for
  with ``stream_options.include_usage``); without it, or when it says 0 beside
  generated text (flagged ``usage_zero``), the token chunks are counted and the
  source is recorded as ``"chunks"``;
* ``data: {"error": ...}`` inside an HTTP 200 stream, a chunk that is not JSON or
  has no ``choices``, and a stream that ends without ``data: [DONE]`` are failures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from llmload.core.metrics import APIS, MODES
from llmload.core.records import PromptRecord
from llmload.core.sse import SSEDecoder, SSEEvent, SSEFormatError

#: URL path of each API style.
ENDPOINTS = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}
MODELS_PATH = "/v1/models"


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


def build_body(record: PromptRecord, params: GenerationParams, model: str,
               messages: list[dict] | None = None) -> dict:
    """The JSON body of one request for ``record`` in ``params``' API style and mode.

    ``messages`` replaces the record's own (a conversation's history so far).
    """
    body: dict = {"model": model}
    if params.api == "chat":
        body["messages"] = [dict(m) for m in (messages if messages is not None else record.messages)]
    else:
        body["prompt"] = record.prompt
    body["max_tokens"] = params.max_tokens or record.max_tokens
    body["temperature"] = params.temperature
    body["stream"] = params.stream
    if params.stream:
        body["stream_options"] = {"include_usage": True}
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


def http_error_message(status: int, body: bytes) -> str:
    """One line for a non-2xx answer: ``HTTP 404: The model `x` does not exist.``."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        detail = error_detail(json.loads(text)) if text else ""
    except json.JSONDecodeError:
        detail = _one_line(text, 200)
    return f"HTTP {status}: {detail}" if detail else f"HTTP {status} (empty body)"


def choice_text(api: str, choice: dict) -> str:
    """The generated text a choice carries ('' for none), for either API."""
    if api == "chat":
        holder = choice.get("delta") if "delta" in choice else choice.get("message")
        text = (holder or {}).get("content") if isinstance(holder, dict) else None
    else:
        text = choice.get("text")
    return text if isinstance(text, str) else ""


@dataclass
class Outcome:
    """Raw fields of one response (everything a RequestResult holds besides its identity)."""

    token_offsets: list[float] = field(default_factory=list)
    output_tokens: int | None = None
    output_tokens_source: str = "none"
    prompt_tokens: int | None = None
    output_chars: int = 0
    output_text: str = ""
    flags: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def success(self) -> bool:
        return not self.error


def _usage_counts(usage: object) -> tuple[int | None, int | None]:
    """(completion_tokens, prompt_tokens) of a usage object, None where absent."""
    if not isinstance(usage, dict):
        return None, None
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    return (completion if isinstance(completion, int) else None, prompt if isinstance(prompt, int) else None)


#: Flag of a response whose ``usage`` says 0 completion tokens although it carried generated text.
USAGE_ZERO = "usage_zero"


def output_token_count(usage_tokens: int | None, text_chunks: int, flags: list[str]) -> tuple[int, str]:
    """(output tokens, source) of a stream: the server's usage, or the text chunks counted where usage is
    missing or says 0 beside generated text (then flagged :data:`USAGE_ZERO` in ``flags``)."""
    if usage_tokens is not None and (usage_tokens > 0 or text_chunks == 0):
        return usage_tokens, "usage"
    if usage_tokens == 0:
        flags.append(USAGE_ZERO)
    return text_chunks, "chunks"


class StreamReader:
    """Interprets one SSE response: feed each line with its arrival offset, then take :meth:`outcome`.

    :meth:`feed` returns True once ``data: [DONE]`` has arrived and raises
    :class:`WireError` for an error event or a malformed chunk.
    """

    def __init__(self, api: str):
        self.api = api
        self.decoder = SSEDecoder()
        self.token_offsets: list[float] = []
        self.parts: list[str] = []
        self.chars = 0
        self.events = 0
        self.done = False
        self.usage_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self._last_offset = 0.0

    def feed(self, line: bytes | str, offset: float) -> bool:
        """Take one line received ``offset`` seconds after the request started."""
        self._last_offset = offset
        try:
            event = self.decoder.feed(line)
        except UnicodeDecodeError as exc:
            raise WireError(f"malformed SSE: line is not UTF-8 ({exc.reason})") from None
        if event is not None:
            self._event(event, offset)
        return self.done

    def end(self) -> bool:
        """The body ended: take a last event not closed by a blank line; True when ``[DONE]`` was seen."""
        event = self.decoder.flush()
        if event is not None:
            self._event(event, self._last_offset)
        return self.done

    def _event(self, event: SSEEvent, offset: float) -> None:
        if self.done:
            return  # nothing after [DONE] counts
        self.events += 1
        if event.is_done:
            self.done = True
            return
        try:
            chunk = event.json()
        except SSEFormatError as exc:  # "malformed SSE data (not JSON): ..."
            raise WireError(str(exc)) from None
        if "error" in chunk:
            raise WireError(f"error event in the stream: {error_detail(chunk)}")
        tokens, prompt = _usage_counts(chunk.get("usage"))
        if tokens is not None:
            self.usage_tokens, self.prompt_tokens = tokens, prompt
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise WireError(f"malformed SSE: chunk without a choices list: {event.data[:120]!r}")
        if choices:
            if not isinstance(choices[0], dict):
                raise WireError(f"malformed SSE: choice is not an object: {event.data[:120]!r}")
            text = choice_text(self.api, choices[0])
            if text:
                self.token_offsets.append(offset)
                self.parts.append(text)
                self.chars += len(text)

    def outcome(self) -> Outcome:
        """What the stream delivered; an error when it ended without ``[DONE]``."""
        result = Outcome(token_offsets=list(self.token_offsets), prompt_tokens=self.prompt_tokens,
                         output_chars=self.chars, output_text="".join(self.parts))
        result.output_tokens, result.output_tokens_source = output_token_count(
            self.usage_tokens, len(self.token_offsets), result.flags)
        if not self.done:
            result.error = "stream ended without [DONE]" if self.events else "stream ended without any SSE event"
        return result


def read_body(api: str, body: bytes) -> Outcome:
    """Interpret a complete (sync) JSON response body; the Outcome's error says what is wrong."""
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Outcome(error=f"malformed JSON body ({exc.__class__.__name__}): {_one_line(repr(body[:120]))}")
    if not isinstance(payload, dict):
        return Outcome(error="malformed JSON body: not an object")
    if "error" in payload:
        return Outcome(error=f"error in the response body: {error_detail(payload)}")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return Outcome(error="malformed JSON body: no choices")
    text = choice_text(api, choices[0])
    tokens, prompt = _usage_counts(payload.get("usage"))
    flags: list[str] = []
    if tokens is None:
        source = "none"
    elif tokens == 0 and text:
        source = "none"
        flags.append(USAGE_ZERO)
    else:
        source = "usage"
    return Outcome(output_tokens=tokens, output_tokens_source=source, prompt_tokens=prompt, output_chars=len(text),
                   output_text=text, flags=flags)


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
