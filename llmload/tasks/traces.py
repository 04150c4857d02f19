"""Production traces to replay: each request's time, input and output lengths and shared prefix blocks.

Four formats (docs/traces.md), told apart by their first line where that is
unambiguous (:func:`detect_format`):

* ``mooncake``: JSON Lines ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}``
  (Mooncake / Alibaba); each hash id names one block of :data:`BLOCK_TOKENS` prompt tokens;
* ``azure``: the Azure LLM inference traces, CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (the timestamp a date and time, ``2023-11-16 18:15:46.6805900``);
* ``burstgpt``: BurstGPT, CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
  (seconds); rows whose response has 0 tokens (failed in the original log) are left out;
* ``jsonl``: the suite's own JSON Lines ``{"timestamp_s": s, "input_length": n, "output_length": m}`` with
  optional ``hash_ids``.

Times become seconds after the trace's first request. A bad line raises
:class:`TraceError` naming the file, the line and the field.
:class:`TracePrompts` builds each request's prompt to its exact length in the
model's tokens, requests that share hash ids sharing those blocks token for token.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
import re
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from llmload.core.records import DatasetError, PromptRecord

if TYPE_CHECKING:  # pragma: no cover
    from llmload.tasks.tokens import TokenCounter

FORMATS = ("mooncake", "azure", "burstgpt", "jsonl")
#: Prompt tokens per hash id (Mooncake's block size); ``--trace-block-size`` changes it.
BLOCK_TOKENS = 512

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceError(DatasetError):
    """A trace that cannot be replayed; the message names the file, the line and the field (one line)."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: its line, its time after the trace's first request, its lengths and blocks."""

    line: int
    time_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A trace read from ``path``, its requests in time order."""

    path: Path
    format: str
    requests: tuple[TraceRequest, ...]

    def window(self, start_s: float = 0.0, duration_s: float = 0.0) -> tuple[TraceRequest, ...]:
        """The requests at ``start_s <= time < start_s + duration_s`` (duration 0: to the end)."""
        end = start_s + duration_s if duration_s else math.inf
        chosen = tuple(r for r in self.requests if start_s <= r.time_s < end)
        if not chosen:
            span = f"[{start_s:g} s, {end:g} s)" if duration_s else f"from {start_s:g} s on"
            raise TraceError(f"{self.path}: --trace-start/--trace-duration: no request {span}; the trace spans "
                             f"{self.requests[-1].time_s:g} s after its first request")
        return chosen


def offsets(requests: Sequence[TraceRequest], start_s: float = 0.0, scale: float = 1.0) -> list[float]:
    """When each request is due, in seconds after the replay's start: ``(time - start_s) * scale``."""
    return [(r.time_s - start_s) * scale for r in requests]


# --------------------------------------------------------------------------- reading

def _fail(path: Path, line: int, field: str, what: str) -> TraceError:
    return TraceError(f"{path}:{line}: {field}: {what}")


def _integer(path: Path, line: int, field: str, value, minimum: int = 1) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _fail(path, line, field, "missing")
    try:
        number = int(value) if not isinstance(value, float) or value.is_integer() else None
        if isinstance(value, bool) or number is None:
            raise ValueError
    except ValueError:
        raise _fail(path, line, field, f"{value!r} is not an integer") from None
    if number < minimum:
        raise _fail(path, line, field, f"{number} is below {minimum}")
    return number


def _number(path: Path, line: int, field: str, value) -> float:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise _fail(path, line, field, "missing")
    try:
        number = float(value)
        if isinstance(value, bool) or not math.isfinite(number):
            raise ValueError
    except ValueError:
        raise _fail(path, line, field, f"{value!r} is not a number") from None
    if number < 0:
        raise _fail(path, line, field, f"{value} is negative")
    return number


_AZURE_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(\.\d+)?")


def _azure_time(path: Path, line: int, value) -> float:
    """Epoch-like seconds of an Azure trace's ``TIMESTAMP`` (any number of fractional digits)."""
    if value is None or not str(value).strip():
        raise _fail(path, line, "TIMESTAMP", "missing")
    match = _AZURE_TIME.match(str(value).strip())
    if match is None:
        raise _fail(path, line, "TIMESTAMP", f"{value!r} is not a date and time like 2023-11-16 18:15:46.6805900")
    whole = datetime.fromisoformat(match.group(1).replace("T", " "))
    return (whole - datetime(1970, 1, 1)).total_seconds() + float(match.group(2) or 0)


def _hash_ids(path: Path, line: int, value) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise _fail(path, line, "hash_ids", "not a list of integers")
    return tuple(value)


def detect_format(path: Path, first_line: str) -> str:
    """The format of a trace whose first line is ``first_line``, or :class:`TraceError` when it cannot be told."""
    text = first_line.strip()
    if text.startswith("{"):
        try:
            keys = set(json.loads(text))
        except (json.JSONDecodeError, TypeError):
            keys = set()
        if "timestamp_s" in keys and "timestamp" not in keys:
            return "jsonl"
        if "timestamp" in keys and "timestamp_s" not in keys:
            return "mooncake"
    else:
        header = {h.strip() for h in next(csv.reader([text]), [])}
        if set(AZURE_COLUMNS) <= header:
            return "azure"
        if set(BURSTGPT_COLUMNS) <= header:
            return "burstgpt"
    raise TraceError(f"{path}:1: cannot tell the trace's format from its first line: give --trace-format "
                     f"{'|'.join(FORMATS)} (docs/traces.md)")


def _json_rows(path: Path, lines: list[str], fmt: str):
    time_key = "timestamp" if fmt == "mooncake" else "timestamp_s"
    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _fail(path, number, "line", f"not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise _fail(path, number, "line", "not a JSON object")
        stamp = _number(path, number, time_key, row.get(time_key))
        yield TraceRequest(number, stamp / 1000 if fmt == "mooncake" else stamp,
                           _integer(path, number, "input_length", row.get("input_length")),
                           _integer(path, number, "output_length", row.get("output_length")),
                           _hash_ids(path, number, row.get("hash_ids")))


def _csv_rows(path: Path, lines: list[str], fmt: str):
    reader = csv.DictReader(lines, skipinitialspace=True)
    columns = AZURE_COLUMNS if fmt == "azure" else BURSTGPT_COLUMNS
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise _fail(path, 1, missing[0], f"no such column in the header (a {fmt} trace has "
                                         f"{', '.join(columns)})")
    time_key, input_key, output_key = columns
    for row in reader:
        number = reader.line_num
        if fmt == "azure":
            stamp = _azure_time(path, number, row.get(time_key))
            output = None
        else:
            stamp = _number(path, number, time_key, row.get(time_key))
            output = _integer(path, number, output_key, row.get(output_key), minimum=0)
            if output == 0:
                continue  # a request that failed in the original log
        yield TraceRequest(number, stamp, _integer(path, number, input_key, row.get(input_key)),
                           output or _integer(path, number, output_key, row.get(output_key)))


def read_trace(path: str | Path, fmt: str = "") -> Trace:
    """The requests of the trace at ``path`` (format ``fmt``, or detected), times relative to the first."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file (a trace is JSON Lines or CSV)") from None
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise TraceError(f"{path}: the trace is empty")
    fmt = fmt or detect_format(path, first)
    if fmt not in FORMATS:
        raise TraceError(f"{path}: unknown trace format {fmt!r}: {'|'.join(FORMATS)}")
    rows = _json_rows(path, lines, fmt) if fmt in ("mooncake", "jsonl") else _csv_rows(path, lines, fmt)
    requests, previous = [], None
    time_field = {"mooncake": "timestamp", "jsonl": "timestamp_s", "azure": "TIMESTAMP", "burstgpt": "Timestamp"}[fmt]
    for request in rows:
        if previous is not None and request.time_s < previous.time_s:
            raise _fail(path, request.line, time_field, f"earlier than line {previous.line}'s: a trace must be "
                                                        "in time order")
        requests.append(request)
        previous = request
    if not requests:
        raise TraceError(f"{path}: the trace holds no request")
    zero = requests[0].time_s
    return Trace(path, fmt, tuple(replace(r, time_s=r.time_s - zero) for r in requests))


# --------------------------------------------------------------------------- prompts

@functools.lru_cache(maxsize=4)
def single_token_words(counter: "TokenCounter") -> tuple[str, ...]:
    """Words that are one token each with a leading space, and stay one token each when strung together.

    A prompt made of them has exactly as many tokens as words (plus the
    tokenizer's special tokens), and a block of them is the same tokens
    wherever it stands. Checked over the whole list at once.
    """
    tokenizer = counter.tokenizer
    candidates = sorted((i, s) for tok, i in tokenizer.get_vocab().items()
                        if re.fullmatch(r" [a-z]{3,9}", s := tokenizer.convert_tokens_to_string([tok])))
    words = tuple(s for _, s in candidates)
    if not words or counter.text_ids(["".join(words)])[0] != [i for i, _ in candidates]:
        raise DatasetError(f"the tokenizer of {counter.name} has no words that stay one token each when strung "
                           "together: trace prompts cannot be built to exact lengths with it")
    return words


class TracePrompts:
    """Builds each trace request's prompt, exactly ``input_length`` tokens of the model, from seeded words.

    The prompt is the request's hash blocks, each ``block_size`` words drawn
    from a generator seeded by ``(seed, hash id)``, then words of its own (seeded
    by its line), cut to the length: requests sharing hash ids share those
    blocks token for token. The completion prompt counts the tokenizer's special
    tokens; the chat message is shorter by the chat template's tokens, so that
    either form the server sees is ``input_length`` tokens.
    """

    def __init__(self, counter: "TokenCounter", block_size: int = BLOCK_TOKENS, seed: int = 0, task: str = "trace"):
        self.counter, self.block_size, self.seed, self.task = counter, block_size, seed, task
        self.words = single_token_words(counter)
        self.special = counter.special_tokens
        probe = [{"role": "user", "content": "".join(self.words[:8])}]
        chat = counter.chat_tokens([probe])[0]
        self.chat_overhead = None if chat is None else chat - 8

    @functools.lru_cache(maxsize=4096)
    def block(self, hash_id: int) -> tuple[str, ...]:
        """The words of one hash block (the same for every request that names it)."""
        return tuple(random.Random(f"{self.seed}:block:{hash_id}").choices(self.words, k=self.block_size))

    def _words(self, request: TraceRequest, count: int) -> list[str]:
        words: list[str] = []
        for hash_id in request.hash_ids:
            if len(words) >= count:
                break
            words.extend(self.block(hash_id))
        if len(words) < count:
            own = random.Random(f"{self.seed}:line:{request.line}")
            words.extend(own.choices(self.words, k=count - len(words)))
        return words[:count]

    def overhead(self, api: str) -> int:
        """Tokens the server adds to the words: special tokens (completion) or the chat template's (chat)."""
        return self.special if api == "completion" or self.chat_overhead is None else self.chat_overhead

    def record(self, request: TraceRequest) -> PromptRecord:
        """The prompt record of one request: ``input_length`` tokens in both forms, ``output_length`` to generate."""
        words = self._words(request, max(request.input_length - min(self.special, self.overhead("chat")), 1))
        prompt = "".join(words[:max(request.input_length - self.special, 1)])
        content = "".join(words[:max(request.input_length - self.overhead("chat"), 1)])
        return PromptRecord(id=f"{self.task}:{request.line}", task=self.task, source="trace", prompt=prompt,
                            messages=({"role": "user", "content": content},), max_tokens=request.output_length,
                            input_tokens=request.input_length,
                            metadata={"trace_line": request.line, "trace_time_s": request.time_s,
                                      "hash_ids": list(request.hash_ids)})

    def check(self, path: Path, requests: Sequence[TraceRequest], api: str, max_model_len: int | None) -> None:
        """Every request's lengths fit the context and hold the tokens the server adds; else :class:`TraceError`."""
        check_lengths(path, requests, max_model_len, self.overhead(api), api)


def check_lengths(path: Path, requests: Sequence[TraceRequest], max_model_len: int | None, overhead: int = 0,
                  api: str = "") -> None:
    """Every request's input holds more than the ``overhead`` tokens the server adds to a prompt, and its input
    and output fit ``max_model_len`` (None: unchecked); else :class:`TraceError` naming the first that does not."""
    for r in requests:
        if r.input_length <= overhead:
            raise _fail(path, r.line, "input_length", f"{r.input_length} tokens cannot hold a prompt: the "
                                                      f"{api} form adds {overhead} tokens of its own")
        if max_model_len and r.input_length + r.output_length > max_model_len:
            raise _fail(path, r.line, "input_length + output_length",
                        f"{r.input_length} + {r.output_length} tokens exceed the model's context of "
                        f"{max_model_len} (--max-model-len)")
