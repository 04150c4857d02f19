"""Measured request results, the metric catalogue, and every metric formula of the suite, defined once.

The load generator records raw timings only (:class:`RequestResult`: when the
request was due and sent, when each chunk carrying generated text arrived, when
it ended). Everything derived from them is computed here and nowhere else: per
request by :func:`request_metrics`, per run by :func:`summarize` (exact, from
all values) or by :class:`LiveStats` (bounded memory, from mergeable sketches).
The Locust stats rows, the web UI, the summary line, the reports and the
benchmarks all read the same catalogue (:data:`METRICS`, :data:`FIGURES`).

Definitions (``t0`` = the moment the request is sent; TTFT is what the seed
called P2FT):

* An *output chunk* is a streamed event that carries generated tokens of any
  kind: reasoning (``reasoning_content`` / ``reasoning``), answer text, or a
  tool call (role-only chunks, usage chunks and ``[DONE]`` are not).
* **E2E / total latency**: ``t0`` to the full JSON body (sync) or to the last
  output chunk (stream; the usage chunk and ``[DONE]`` do not extend it).
* **TTFT**: ``t0`` to the first output chunk, reasoning included (stream only),
  as vLLM's benchmark, GuideLLM and AIPerf count it.
* **TTFO** (time to first output token, AIPerf's name): ``t0`` to the first
  chunk of the answer (content or tool call, not reasoning); TTFT without
  reasoning (stream only).
* **ITL**: the gap before each output token (stream only): a chunk that carries
  ``k`` tokens (known from the server's continuous usage or a tokenizer,
  ``chunk_tokens``) gives ``k`` gaps of ``gap / k``; where the per-chunk counts
  are unknown, one gap per chunk. Either way ``E2E - TTFT == sum(ITL)``.
* **TPOT**: ``(E2E - TTFT) / tokens after the first chunk`` (stream only), the
  mean ITL of the request; the tokens are ``sum(chunk_tokens) - chunk_tokens[0]``
  where the per-chunk counts are known, else ``output_tokens - 1`` (vLLM's).
* **Output tokens** count reasoning tokens too (usage's ``completion_tokens``);
  **reasoning tokens** are usage's ``completion_tokens_details.reasoning_tokens``
  (``output_tokens_details`` in the Responses API).
* **Token generation speed**: ``output_tokens / E2E`` for one request.
* **Dispatch lag**: ``start_time - intended_start``, how late the load
  generator sent a request against its schedule (open-loop runs only); the
  ``*_sched`` latencies add it, i.e. they are measured from the intended start.
* **Request / token throughput**: successful requests / output tokens over the
  run's wall time, from the first request's start to the last request's end.
* **Cancelled**: requests the client abandoned on purpose (``--cancel-rate``,
  :mod:`llmload.core.cancel`): counted apart, neither successes nor failures,
  and left out of every latency, throughput and SLO figure.
* **SLO attainment**: the share of requests (failures count as misses) that
  meet every target of an :class:`SLO`; **goodput**: those requests per second
  of wall time. Without an SLO every success meets it and every failure misses
  it, so the goodput would be the request throughput: it is not repeated (None).
* **Failures** are classed once, from the raw fields (:func:`failure_class`:
  rejected 429, server error, client error, connection, timeout, protocol) and
  counted per class (``failed_<class>``); their own latency (first send to the
  error, ``failure_latency``) is a metric apart: every other latency, the
  throughputs and the wall time count successful requests only.
* **Retries** (``--retry``, :mod:`llmload.core.retry`): a retried request is one
  request, its latencies from its first attempt's send (the waits included, as
  its user waited), its earlier attempts in ``retries``.
* **Where the time goes** (:func:`server_parts`): the server's own durations of
  a request (``server_timing``, vLLM's ``metrics`` object; its request span,
  ``server_spans``, where that lacks one): **frontend** (received to the engine's
  queue), **queue**, **prefill** (scheduled to the first token), **decode**
  (first to last token). With them a stream's TTFT = **TTFT residual** (client,
  network, and the frontend where the server gives none) + frontend + queue +
  prefill, and its E2E = TTFT + decode + **tail** (``(E2E - TTFT) - decode``); a
  sync request's E2E = **E2E residual** + frontend + queue + prefill + decode.
  Only durations are combined (the server's clock and the client's are never
  subtracted from each other), and a negative residual or tail is kept as
  measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import msgspec
import numpy as np
from ddsketch import DDSketch

from llmload.core.cliargs import parse_duration
from llmload.core.formats import FORMAT_VERSION
from llmload.core.records import known_fields
from llmload.core.wire import SERVER_REPORTED

MODES = ("sync", "stream")

#: Flags of a failed request's cause, set by the client (:mod:`llmload.core.client`): a refused or reset
#: connection (the server is not there); no complete answer within ``--timeout``; a connection that failed otherwise
#: (closed mid-answer, a network time-out). A 200 answer that carried the server's own error is flagged
#: :data:`~llmload.core.wire.SERVER_REPORTED`.
UNREACHABLE = "unreachable"
TIMED_OUT = "timeout"
CONNECTION = "connection"
#: The classes of a failed request (:func:`failure_class`): title, definition. Each is the figure ``failed_<class>``.
FAILURE_CLASSES: dict[str, tuple[str, str]] = {
    "rejected": ("rejected (429)", "HTTP 429: the server turned the request away (rate limit, full queue)"),
    "server_error": ("server errors (5xx)", "HTTP 5xx, or the server's own error inside a 200 answer (an error "
                                            "event, a failed response)"),
    "client_error": ("client errors (4xx)", "HTTP 4xx other than 429 (a bad request, an unknown model)"),
    "connection": ("connection", "a refused, reset or dropped connection, or nothing sent (no model to ask for)"),
    "timeout": ("timeouts", "no complete answer within --timeout"),
    "protocol": ("protocol", "an answer that breaks the protocol: a malformed or truncated stream or body"),
}


#: Encodes a RequestResult for the raw log (its fields in order).
_JSON = msgspec.json.Encoder()


@dataclass
class RequestResult:
    """Raw measurement of one request, as the load generator saw it (nothing derived but ``slo_ok``)."""

    request_id: str
    task: str
    api: str
    mode: str
    start_time: float  # epoch seconds when the request was sent
    end_offset: float  # seconds from start to the full body (sync) or the stream's end
    token_offsets: list[float] = field(default_factory=list)  # seconds from start, per output chunk (any kind)
    output_tokens: int | None = None
    output_tokens_source: str = "none"  # "usage" (server-reported) | "chunks" (fallback count) | "none"
    prompt_tokens: int | None = None
    success: bool = True
    status_code: int = 0
    error: str = ""
    prompt_id: str = ""
    worker: str = ""
    output_chars: int = 0
    output_text: str = ""  # the generated text (for token reconciliation in the reports)
    intended_start: float | None = None  # epoch seconds the schedule meant it to go out (open loop only)
    warmup: bool = False  # sent, but left out of every statistic
    slo_ok: bool | None = None  # met every --slo target (None: no SLO set)
    turn: int | None = None  # index of the turn in a multi-turn conversation (0 = first)
    flags: list[str] = field(default_factory=list)  # anomalies worth counting, e.g. "usage_zero"
    format_version: int = FORMAT_VERSION  # the raw log's format (llmload.core.formats)
    first_output_offset: float | None = None  # seconds from start to the first answer chunk (not reasoning)
    reasoning_tokens: int | None = None  # usage's reasoning token count (None: not reported)
    reasoning_text: str = ""  # the generated reasoning (reasoning_content / reasoning deltas)
    tool_calls: int = 0  # tool calls the answer made
    chunk_tokens: list[int] = field(default_factory=list)  # tokens each output chunk carried, where known
    chunk_tokens_source: str = "none"  # "usage" (continuous usage stats) | "tokenizer" | "chunks" (unknown)
    cancelled: bool = False  # the client closed the connection at its cancel point (success False, error "")
    cancel_after: str = ""  # the cancel point drawn for it (--cancel-after), e.g. "ttft+0.8s" ("": none)
    span_id: str = ""  # the client span of its W3C traceparent (16 hex digits; its trace id is request_id)
    server_timing: dict[str, float] | None = None  # the server's own per-request timing, ms (None: none given)
    server_spans: dict[str, float] | None = None  # the server's request span's timing, ms (set when read; spans.py)
    # the earlier attempts of a request retried (--retry), in order: {"status": HTTP status, "error": its message,
    # "end": seconds from the first send to its answer, "wait": seconds waited before the next attempt}
    retries: list[dict] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """Failed (not a cancel, which is neither a success nor a failure)."""
        return not self.success and not self.cancelled

    @property
    def attempts(self) -> int:
        """HTTP requests sent for it: 1, plus one per retry."""
        return 1 + len(self.retries)

    @property
    def retry_wait(self) -> float:
        """Seconds it waited between its attempts (part of its latencies)."""
        return sum(float(attempt.get("wait") or 0.0) for attempt in self.retries)

    def to_json(self) -> str:
        """One compact JSON object (msgspec: asdict would deep-copy every token's offset first)."""
        return _JSON.encode(self).decode("utf-8")

    @classmethod
    def from_dict(cls, data: dict) -> "RequestResult":
        return cls(**known_fields(cls, data))


def failure_class(result: RequestResult) -> str | None:
    """The :data:`FAILURE_CLASSES` key of a failed request, from its status code and flags (None: not a failure).

    The status decides where there is one (429, 5xx, other 4xx); then the client's flags: a time-out, a failed
    connection (or nothing sent: no status); what is left is an answer that broke the protocol."""
    if not result.failed:
        return None
    status, flags = result.status_code, result.flags
    if status == 429:
        return "rejected"
    if status >= 500 or SERVER_REPORTED in flags:
        return "server_error"
    if status >= 400:
        return "client_error"
    if TIMED_OUT in flags:
        return "timeout"
    if status == 0 or UNREACHABLE in flags or CONNECTION in flags:
        return "connection"
    return "protocol"


@dataclass(frozen=True)
class RequestMetrics:
    """Metrics of one request, derived from a :class:`RequestResult` by :func:`request_metrics`."""

    e2e: float
    ttft: float | None
    tpot: float | None
    itl: tuple[float, ...]
    output_tokens: int
    tokens_per_s: float | None
    dispatch_lag: float | None = None
    e2e_sched: float | None = None
    ttft_sched: float | None = None
    ttfo: float | None = None
    reasoning_tokens: int | None = None
    failure_latency: float | None = None  # a failed request's first send to its error (None: not a failure)
    frontend: float | None = None  # the server's parts (server_parts), seconds
    queue: float | None = None
    prefill: float | None = None
    decode: float | None = None
    ttft_residual: float | None = None  # stream: TTFT - (frontend + queue + prefill)
    tail: float | None = None  # stream: (E2E - TTFT) - decode
    e2e_residual: float | None = None  # sync: E2E - (frontend + queue + prefill + decode)


#: Where each server part comes from, in ms: the ``metrics`` object's key (vLLM's names, the basic server's
#: ``frontend_time_ms``), then the request span's (``server_spans``, :mod:`llmload.core.spans`).
PART_SOURCES = {"frontend": ("frontend_time_ms", None), "queue": ("queue_time_ms", "time_in_queue_ms"),
                "prefill": ("time_to_first_token_ms", "time_in_model_prefill_ms"),
                "decode": ("generation_time_ms", "time_in_model_decode_ms")}
#: The parts of a latency in the order they stack (client and network first): a stream's TTFT, its E2E, and a
#: sync request's E2E.
TTFT_PARTS = ("ttft_residual", "frontend", "queue", "prefill")
STREAM_PARTS = TTFT_PARTS + ("decode", "tail")
SYNC_PARTS = ("e2e_residual", "frontend", "queue", "prefill", "decode")


def server_parts(result: RequestResult) -> dict[str, float]:
    """The server's own durations of a request in seconds (frontend, queue, prefill, decode; those it gave).

    Each part from ``server_timing`` first, else from ``server_spans``. vLLM's
    span gives no frontend of its own: its ``time_to_first_token`` (from arrival,
    on the API server's clock) less its queue and prefill (on the engine's) is the
    frontend there, the first token's way back to the API server included.
    """
    timing, spans = result.server_timing or {}, result.server_spans or {}
    parts = {}
    for part, (key, span_key) in PART_SOURCES.items():
        value = timing.get(key)
        if value is None and span_key is not None:
            value = spans.get(span_key)
        if value is not None:
            parts[part] = value / 1000.0
    arrival = [spans.get(k) for k in ("time_to_first_token_ms", "time_in_queue_ms", "time_in_model_prefill_ms")]
    if "frontend" not in parts and None not in arrival:
        parts["frontend"] = (arrival[0] - arrival[1] - arrival[2]) / 1000.0
    return parts


def split_latency(mode: str, e2e: float, ttft: float | None, parts: dict[str, float]) -> dict[str, float]:
    """The residuals and the tail of one request from its client latencies and its :func:`server_parts`.

    The residual needs the queue and the prefill (and a sync request's the decode); the frontend counts where
    the server gave it, else it stays in the residual. Nothing is clipped: a negative value is what was measured.
    """
    out: dict[str, float] = {}
    if "queue" not in parts or "prefill" not in parts:
        return out
    server = parts.get("frontend", 0.0) + parts["queue"] + parts["prefill"]
    if mode == "stream" and ttft is not None:
        out["ttft_residual"] = ttft - server
        if "decode" in parts:
            out["tail"] = (e2e - ttft) - parts["decode"]
    elif mode != "stream" and "decode" in parts:
        out["e2e_residual"] = e2e - server - parts["decode"]
    return out


def per_token_gaps(offsets: Sequence[float], counts: Sequence[int]) -> tuple[float, ...]:
    """The gap before each token: a chunk of ``k`` tokens after a gap ``g`` gives ``k`` gaps of ``g / k``.

    A chunk said to carry no token passes its gap on to the next chunk that does,
    so the gaps always add up to ``offsets[-1] - offsets[0]``.
    """
    gaps: list[float] = []
    pending = 0.0
    for before, after, count in zip(offsets, offsets[1:], counts[1:]):
        pending += after - before
        if count > 0:
            gaps.extend([pending / count] * count)
            pending = 0.0
    if pending > 0:
        gaps.append(pending)
    return tuple(gaps)


def request_metrics(result: RequestResult) -> RequestMetrics:
    """Derive E2E, TTFT, TTFO, TPOT, inter-token gaps, generation speed and dispatch lag from raw timings."""
    offsets = result.token_offsets
    counts = result.chunk_tokens if len(result.chunk_tokens) == len(offsets) else None
    ttft = ttfo = tpot = None
    itl: tuple[float, ...] = ()
    tokens = result.output_tokens or 0
    if result.mode == "stream" and offsets:
        e2e = offsets[-1]
        ttft = offsets[0]
        ttfo = result.first_output_offset
        if counts:
            itl = per_token_gaps(offsets, counts)
            after_first = sum(counts) - counts[0]
        else:
            itl = tuple(b - a for a, b in zip(offsets, offsets[1:]))
            after_first = tokens - 1
        tpot = (e2e - ttft) / after_first if after_first > 0 else None
    else:
        e2e = result.end_offset
    speed = tokens / e2e if tokens and e2e > 0 else None
    lag = result.start_time - result.intended_start if result.intended_start is not None else None
    parts = server_parts(result) if result.server_timing or result.server_spans else {}
    return RequestMetrics(e2e=e2e, ttft=ttft, tpot=tpot, itl=itl, output_tokens=tokens, tokens_per_s=speed,
                          dispatch_lag=lag, e2e_sched=None if lag is None else e2e + lag,
                          ttft_sched=None if lag is None or ttft is None else ttft + lag, ttfo=ttfo,
                          reasoning_tokens=result.reasoning_tokens,
                          failure_latency=result.end_offset if result.failed else None, **parts,
                          **(split_latency(result.mode, e2e, ttft, parts) if parts else {}))


# --------------------------------------------------------------------------- SLOs


@dataclass(frozen=True)
class SLO:
    """Latency targets in seconds (None: no target); a request meets the SLO when it meets every target."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    itl: float | None = None  # the largest gap between two chunks

    KEYS = ("ttft", "tpot", "e2e", "itl")

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in self.KEYS)

    def met(self, result: RequestResult, metrics: RequestMetrics | None = None) -> bool | None:
        """True/False for a request (a failure never meets it); None when no target is set.

        Targets apply to what was measured: a sync request has no TTFT, TPOT or ITL,
        so only its E2E target counts. Latencies of an open-loop request count from
        its intended start (:data:`RequestMetrics.ttft_sched`), as a user of the
        schedule would feel them.
        """
        if self.empty or result.cancelled:
            return None
        if not result.success:
            return False
        m = metrics or request_metrics(result)
        measured = {"ttft": m.ttft_sched if m.ttft_sched is not None else m.ttft,
                    "tpot": m.tpot, "e2e": m.e2e_sched if m.e2e_sched is not None else m.e2e,
                    "itl": max(m.itl) if m.itl else None}
        return all(target is None or measured[key] is None or measured[key] <= target
                   for key, target in ((k, getattr(self, k)) for k in self.KEYS))

    @classmethod
    def parse(cls, text: str) -> "SLO":
        """``ttft=500,tpot=50ms,e2e=4s`` (milliseconds unless suffixed ``ms`` or ``s``); ValueError says why."""
        targets: dict[str, float] = {}
        for item in (part.strip() for part in (text or "").split(",")):
            if not item:
                continue
            key, sep, value = item.partition("=")
            key, value = key.strip().lower(), value.strip().lower()
            if not sep or key not in cls.KEYS:
                raise ValueError(f"{item!r} is not KEY=MS with KEY one of {', '.join(cls.KEYS)}")
            if key in targets:
                raise ValueError(f"{key} is given twice")
            try:
                seconds = parse_duration(value, "ms")
            except ValueError:
                raise ValueError(f"{key}={value!r}: a target is a positive number of milliseconds (or 0.5s, 500ms)")
            targets[key] = seconds
        if not targets:
            raise ValueError(f"no target given: use KEY=MS with KEY one of {', '.join(cls.KEYS)}")
        return cls(**targets)

    def describe(self) -> str:
        """``ttft<=500ms, e2e<=4000ms`` (or ``none``)."""
        parts = [f"{k}<={getattr(self, k) * 1000:g}ms" for k in self.KEYS if getattr(self, k) is not None]
        return ", ".join(parts) or "none"

    def to_dict(self) -> dict:
        """Targets in milliseconds, only those that are set."""
        return {k: getattr(self, k) * 1000 for k in self.KEYS if getattr(self, k) is not None}

    def argument(self) -> str:
        """``ttft=500,e2e=4000`` (milliseconds): the text :meth:`parse` reads back, as ``--slo`` takes it."""
        return ",".join(f"{key}={value:g}" for key, value in self.to_dict().items())


# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class Metric:
    """One per-request distribution the suite reports: its name, unit, formula and statistics."""

    name: str  # key in summaries and prefix of its columns (``ttft_p50``)
    title: str  # as shown in tables, Locust rows and the web UI
    unit: str  # unit of the stored values: "s" (shown in ms), "tok/s" or "tok"
    formula: str
    value: Callable[[RequestMetrics], float | Sequence[float] | None]
    stats: tuple[str, ...] = ("mean", "p50", "p90", "p99")
    headline: tuple[str, ...] = ("p50", "p99")  # the statistics of the Markdown report and the web UI
    locust_row: bool = False  # logged as a Locust ``METRIC`` row (ms)
    many: bool = False  # several values per request (inter-token gaps)
    of_failures: bool = False  # its values come from failed requests (every other metric's from successes)

    @property
    def scale(self) -> float:
        """Factor from the stored unit to the shown one (seconds are shown in ms)."""
        return 1000.0 if self.unit == "s" else 1.0

    @property
    def shown_unit(self) -> str:
        return "ms" if self.unit == "s" else self.unit

    def column(self, stat: str) -> str:
        return f"{self.name}_{stat}"

    def values(self, metrics: RequestMetrics) -> Sequence[float]:
        """This metric's values for one request (none, one, or several)."""
        value = self.value(metrics)
        if value is None:
            return ()
        return value if self.many else (value,)


#: The statistics of the latency's parts (means add up, so the decomposition is of means).
PART_STATS = ("mean", "p50", "p99")

METRICS: tuple[Metric, ...] = (
    Metric("e2e", "E2E", "s", "t0 to the full body (sync) or the last output chunk (stream)", lambda m: m.e2e),
    Metric("ttft", "TTFT", "s", "t0 to the first output chunk of any kind: reasoning, content or tool call (stream)",
           lambda m: m.ttft, stats=("mean", "p50", "p90", "p95", "p99"), headline=("p50", "p90", "p99"),
           locust_row=True),
    Metric("ttfo", "TTFO", "s", "t0 to the first answer chunk, content or tool call, not reasoning (stream; "
           "AIPerf's time to first output token)", lambda m: m.ttfo, headline=("p50",)),
    Metric("tpot", "TPOT", "s", "(E2E - TTFT) / tokens after the first chunk (stream)", lambda m: m.tpot,
           headline=("mean",), locust_row=True),
    Metric("itl", "ITL", "s", "the gap before each output token; a chunk of k tokens gives k gaps of gap / k "
           "(stream)", lambda m: m.itl, headline=(), many=True),
    Metric("reasoning_tokens", "reasoning tokens", "tok", "usage's reasoning tokens per request (part of the "
           "output tokens)", lambda m: m.reasoning_tokens, stats=("mean", "p50", "p99"), headline=("mean",)),
    Metric("tokens_per_s", "generation speed", "tok/s", "output tokens / E2E, per request",
           lambda m: m.tokens_per_s, headline=("mean",)),
    Metric("dispatch_lag", "dispatch lag", "s", "start_time - intended_start (open loop)",
           lambda m: m.dispatch_lag, stats=("mean", "p50", "p99", "max"), headline=("p99", "max"), locust_row=True),
    Metric("e2e_sched", "E2E from schedule", "s", "intended start to the end: E2E + dispatch lag (open loop)",
           lambda m: m.e2e_sched, headline=("p50", "p99")),
    Metric("ttft_sched", "TTFT from schedule", "s", "intended start to the first text chunk (open loop)",
           lambda m: m.ttft_sched, headline=("p50", "p99")),
    Metric("failure_latency", "failure latency", "s", "first send to the error, failed requests only (retry waits "
           "included; never in E2E or TTFT)", lambda m: m.failure_latency, stats=("mean", "p50", "p99", "max"),
           headline=(), of_failures=True),
    # where the time goes (server_parts, split_latency): shown in their own section, not the headline tables
    Metric("frontend", "server frontend", "s", "the server's own time from receiving the request to its engine's "
           "queue (frontend_time_ms; vLLM: its span's time to first token from arrival - queue - prefill)",
           lambda m: m.frontend, stats=PART_STATS, headline=()),
    Metric("queue", "server queue", "s", "queued to scheduled in the server's engine (queue_time_ms)",
           lambda m: m.queue, stats=PART_STATS, headline=()),
    Metric("prefill", "server prefill", "s", "scheduled to the first token in the server's engine "
           "(the metrics object's time_to_first_token_ms)", lambda m: m.prefill, stats=PART_STATS, headline=()),
    Metric("decode", "server decode", "s", "the first to the last token in the server's engine "
           "(generation_time_ms)", lambda m: m.decode, stats=PART_STATS, headline=()),
    Metric("ttft_residual", "client/network (TTFT)", "s", "TTFT - (frontend + queue + prefill): the client, the "
           "network, and the frontend where the server gives none (stream; may be negative: kept as measured)",
           lambda m: m.ttft_residual, stats=PART_STATS, headline=()),
    Metric("tail", "tail", "s", "(E2E - TTFT) - decode: the first to the last chunk beyond the server's decode "
           "(stream; below 0 where the last tokens carried no text)", lambda m: m.tail, stats=PART_STATS,
           headline=()),
    Metric("e2e_residual", "client/network (E2E)", "s", "E2E - (frontend + queue + prefill + decode): the client, "
           "the network, and the frontend where the server gives none (sync)", lambda m: m.e2e_residual,
           stats=PART_STATS, headline=()),
)
METRIC_BY_NAME = {m.name: m for m in METRICS}
#: The metrics of failed requests (every other metric is of successful ones).
FAILURE_METRICS = tuple(m for m in METRICS if m.of_failures)


@dataclass(frozen=True)
class Figure:
    """One run-level figure (a count or a rate over the run's wall time)."""

    name: str
    title: str
    unit: str
    formula: str
    headline: bool = True


FIGURES: tuple[Figure, ...] = (
    Figure("requests", "requests", "", "requests measured (warm-up excluded)"),
    Figure("failures", "failures", "", "requests that failed"),
    Figure("failure_pct", "failed %", "%", "failures / requests, cancelled ones left out (what --max-error-rate "
           "watches)", headline=False),
    *(Figure(f"failed_{name}", title, "", formula, headline=False)
      for name, (title, formula) in FAILURE_CLASSES.items()),
    Figure("cancelled", "cancelled", "", "requests the client cancelled on purpose (--cancel-rate; not failures, "
           "out of every latency figure; none: no cancel point drawn)"),
    Figure("cancelled_pct", "cancelled %", "%", "cancelled / requests", headline=False),
    Figure("duration_s", "wall time", "s", "first start to the last end of a successful request", headline=False),
    Figure("request_throughput", "req/s", "req/s", "successful requests / wall time"),
    Figure("output_token_throughput", "out tok/s", "tok/s", "output tokens of successful requests / wall time"),
    Figure("total_output_tokens", "output tokens", "", "sum of output tokens", headline=False),
    Figure("slo_attainment", "SLO met %", "%", "requests meeting every SLO target / requests (failures miss)"),
    Figure("goodput", "goodput req/s", "req/s", "requests meeting every SLO target / wall time (failures miss; "
           "without an SLO: none, it would be req/s)"),
    Figure("retried", "retried", "", "requests sent again after a 429 or 503 (--retry; none: no request was)",
           headline=False),
    Figure("attempts", "attempts", "", "HTTP requests sent in all, retries included", headline=False),
    Figure("retry_ok", "ok after retry", "", "retried requests that succeeded", headline=False),
    Figure("retry_wait_s", "retry wait", "s", "seconds waited before retries, over all requests (part of their "
           "latencies)", headline=False),
)
FIGURE_BY_NAME = {f.name: f for f in FIGURES}
#: The figures that count one failure class each: figure name -> class.
CLASS_FIGURES = {f"failed_{name}": name for name in FAILURE_CLASSES}


def summary_columns() -> list[str]:
    """Every column of a flat summary row: the figures, then each metric's statistics."""
    return [f.name for f in FIGURES] + [m.column(s) for m in METRICS for s in m.stats]


def headline_columns() -> list[str]:
    """The columns a compact table shows (Markdown report, web UI)."""
    return ([f.name for f in FIGURES if f.headline]
            + [m.column(s) for m in METRICS for s in m.headline])


def column_title(column: str) -> str:
    """``ttft_p50`` -> ``TTFT p50 ms``; ``request_throughput`` -> ``req/s``."""
    if column in FIGURE_BY_NAME:
        return FIGURE_BY_NAME[column].title
    name, _, stat = column.rpartition("_")
    metric = METRIC_BY_NAME.get(name)
    if metric is None:
        return column
    return f"{metric.title} {stat} {metric.shown_unit}"


def column_scale(column: str) -> float:
    """Factor from a column's stored unit to the shown one (1000 for latencies)."""
    name, _, _ = column.rpartition("_")
    metric = METRIC_BY_NAME.get(name)
    return metric.scale if metric else 1.0


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation (numpy's default); None if empty."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _stat(values: np.ndarray, stat: str) -> float | None:
    if values.size == 0:
        return None
    if stat == "mean":
        return float(values.mean())
    if stat == "max":
        return float(values.max())
    return float(np.percentile(values, float(stat[1:])))


def distribution(values: Sequence[float], stats: Iterable[str] = ("mean", "p50", "p90", "p99")
                 ) -> dict[str, float | None]:
    """``{"mean": .., "p50": .., ...}`` of ``values`` (None when empty)."""
    array = np.asarray(values, dtype=float)
    return {stat: _stat(array, stat) for stat in stats}


@dataclass
class FailureTally:
    """Failures by class and the retries of a set of requests (warm-up excluded): exact counts, mergeable."""

    classes: dict[str, int] = field(default_factory=dict)  # failure class -> requests
    retried: int = 0  # requests with at least one retry
    attempts: int = 0  # HTTP requests sent, retries included
    retry_ok: int = 0  # retried requests that succeeded
    retry_wait_s: float = 0.0  # seconds waited before retries

    def add(self, result: RequestResult) -> None:
        kind = failure_class(result)
        if kind is not None:
            self.classes[kind] = self.classes.get(kind, 0) + 1
        self.attempts += result.attempts
        if result.retries:
            self.retried += 1
            self.retry_ok += result.success
            self.retry_wait_s += result.retry_wait

    def merge(self, other: "FailureTally") -> None:
        for kind, count in other.classes.items():
            self.classes[kind] = self.classes.get(kind, 0) + count
        self.retried += other.retried
        self.attempts += other.attempts
        self.retry_ok += other.retry_ok
        self.retry_wait_s += other.retry_wait_s

    def to_wire(self) -> dict:
        return {"classes": dict(self.classes), "retried": self.retried, "attempts": self.attempts,
                "retry_ok": self.retry_ok, "retry_wait_s": self.retry_wait_s}

    @classmethod
    def from_wire(cls, data: dict | None) -> "FailureTally":
        data = data or {}  # from a worker of a version before the tally
        return cls(dict(data.get("classes") or {}), data.get("retried", 0), data.get("attempts", 0),
                   data.get("retry_ok", 0), data.get("retry_wait_s", 0.0))

    def text(self) -> str:
        """`` [3 rejected (429), 1 timeouts]`` (the classes met), and the retries: for the summary line."""
        parts = [f"{count} {FAILURE_CLASSES[kind][0]}" for kind, count in self.classes.items() if count]
        text = f" [{', '.join(parts)}]" if parts else ""
        if self.retried:
            text += (f", {self.retried} retried ({self.attempts} attempts, {self.retry_ok} ok after retry, "
                     f"{self.retry_wait_s:.1f} s waiting)")
        return text


@dataclass(frozen=True)
class RunSummary:
    """Aggregate metrics of a set of requests (one run, one task, or one cell of the matrix)."""

    requests: int
    failures: int
    duration_s: float
    request_throughput: float
    output_token_throughput: float
    total_output_tokens: int
    slo_attainment: float | None  # percent
    goodput: float | None
    distributions: dict  # metric name -> {stat: value}
    exact: bool = True  # False: percentiles from sketches (relative error, see LiveStats)
    cancelled: int | None = None  # None: no request had a cancel point
    tally: FailureTally = field(default_factory=FailureTally)

    @property
    def cancelled_pct(self) -> float | None:
        if self.cancelled is None:
            return None
        return 100.0 * self.cancelled / self.requests if self.requests else 0.0

    @property
    def failure_pct(self) -> float | None:
        judged = self.requests - (self.cancelled or 0)
        return 100.0 * self.failures / judged if judged else None

    @property
    def retried(self) -> int | None:
        return self.tally.retried or None

    @property
    def attempts(self) -> int | None:
        return self.tally.attempts if self.tally.retried else None

    @property
    def retry_ok(self) -> int | None:
        return self.tally.retry_ok if self.tally.retried else None

    @property
    def retry_wait_s(self) -> float | None:
        return self.tally.retry_wait_s if self.tally.retried else None

    def figure(self, name: str) -> float | int | None:
        """The value of the figure ``name`` (:data:`FIGURES`)."""
        kind = CLASS_FIGURES.get(name)
        return self.tally.classes.get(kind, 0) if kind is not None else getattr(self, name)

    def get(self, metric: str, stat: str) -> float | None:
        return self.distributions.get(metric, {}).get(stat)

    def flat(self) -> dict[str, float | int | None]:
        """One flat dict (``request_throughput``, ``e2e_p50``, ...) in :func:`summary_columns` order."""
        row: dict[str, float | int | None] = {f.name: self.figure(f.name) for f in FIGURES}
        for m in METRICS:
            for stat in m.stats:
                row[m.column(stat)] = self.get(m.name, stat)
        return row

    def line(self) -> str:
        """The one-line summary the load generator prints at the end of a run."""
        def ms(metric: str, stat: str) -> str:
            value = self.get(metric, stat)
            return "" if value is None else f", {METRIC_BY_NAME[metric].title} {stat} {value * 1000:.1f} ms"

        reasoning = self.get("reasoning_tokens", "mean") or None  # a server that reports 0 (vLLM's Responses)
        ttft, ttfo = self.get("ttft", "p50"), self.get("ttfo", "p50")
        answer_later = ttft is not None and ttfo is not None and ttfo - ttft > 0.0005
        cancelled = f", {self.cancelled} cancelled" if self.cancelled is not None else ""
        failed = f"{self.failures} failed{self.tally.text()}"
        text = (f"{self.requests} requests, {failed}{cancelled}{ms('e2e', 'p50')}{ms('ttft', 'p50')}"
                f"{ms('ttfo', 'p50') if answer_later or reasoning else ''}"
                f"{ms('tpot', 'mean')}, {self.request_throughput:.2f} req/s, "
                f"{self.output_token_throughput:.1f} output tok/s")
        if reasoning is not None:
            text += f" ({reasoning:.1f} reasoning tokens per request)"
        if self.get("dispatch_lag", "p99") is not None:
            text += f", dispatch lag p99 {self.get('dispatch_lag', 'p99') * 1000:.1f} ms"
        if self.slo_attainment is not None:
            text += f", SLO met {self.slo_attainment:.1f} %, goodput {self.goodput:.2f} req/s"
        return text


def _summary(requests: int, failures: int, first: float | None, last: float | None, tokens: int,
             slo_met: int | None, distributions: dict, exact: bool, cancelled: int | None = None,
             tally: FailureTally | None = None) -> RunSummary:
    duration = max(last - first, 0.0) if first is not None and last is not None else 0.0
    ok = requests - failures - (cancelled or 0)
    judged = requests - (cancelled or 0)  # a cancelled request is not judged against the SLO

    def rate(count: float) -> float:
        return count / duration if duration > 0 else 0.0

    return RunSummary(requests=requests, failures=failures, duration_s=duration, request_throughput=rate(ok),
                      output_token_throughput=rate(tokens), total_output_tokens=tokens,
                      slo_attainment=None if slo_met is None else (100.0 * slo_met / judged if judged else 0.0),
                      goodput=None if slo_met is None else rate(slo_met), distributions=distributions, exact=exact,
                      cancelled=cancelled, tally=tally or FailureTally())


def summarize(results: Iterable[RequestResult], span: tuple[float, float] | None = None) -> RunSummary:
    """Compute every run-level metric from raw request results, exactly.

    Warm-up requests are left out. Latency figures and throughput count successful
    requests only (cancelled ones count in ``cancelled``, neither failures nor latencies; failures in their classes
    and ``failure_latency``); the run's wall time spans from the first successful request's
    start to the last one's end, or is ``span`` (start, end in epoch seconds: a
    window of the run) where given. SLO figures count ``slo_ok`` where it is set.
    """
    values: dict[str, list[float]] = {m.name: [] for m in METRICS}
    requests = failures = tokens = 0
    slo_met: int | None = None
    cancelled: int | None = None
    first = last = None
    tally = FailureTally()
    for r in results:
        if r.warmup:
            continue
        requests += 1
        tally.add(r)
        if r.cancel_after or r.cancelled:
            cancelled = (cancelled or 0) + r.cancelled
        if r.slo_ok is not None:
            slo_met = (slo_met or 0) + bool(r.slo_ok)
        if r.cancelled:
            continue
        if not r.success:
            failures += 1
            m = request_metrics(r)
            for metric in FAILURE_METRICS:
                values[metric.name].extend(metric.values(m))
            continue
        m = request_metrics(r)
        tokens += m.output_tokens
        first = r.start_time if first is None else min(first, r.start_time)
        end = r.start_time + m.e2e
        last = end if last is None else max(last, end)
        for metric in METRICS:
            values[metric.name].extend(metric.values(m))
    distributions = {m.name: distribution(values[m.name], m.stats) for m in METRICS}
    if span is not None:
        first, last = span
    return _summary(requests, failures, first, last, tokens, slo_met, distributions, exact=True, cancelled=cancelled,
                    tally=tally)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, None when either is missing or the denominator is 0.

    The suite's ratios are always *baseline over server* (``vllm / basic-naive``):
    the reports and the benchmarks both call this with the baseline's figure on top.
    """
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


# --------------------------------------------------------------------------- bounded-memory statistics

#: Relative accuracy of :class:`LiveStats` quantiles: a reported p99 is within 1 % of a true value.
SKETCH_RELATIVE_ACCURACY = 0.01


def sketch_to_bytes(sketch: DDSketch) -> bytes:
    """A sketch in DDSketch's own protobuf form (its bins; count, sum, min and max are not carried)."""
    from ddsketch.pb.proto import DDSketchProto  # protobuf: only where sketches cross processes

    return DDSketchProto.to_proto(sketch).SerializeToString()


def sketch_from_bytes(blob: bytes) -> DDSketch:
    """A sketch written by :func:`sketch_to_bytes`, ready to merge into one of :data:`SKETCH_RELATIVE_ACCURACY`."""
    from ddsketch.pb.proto import DDSketchProto, pb  # protobuf: only where sketches cross processes

    sketch = DDSketch(SKETCH_RELATIVE_ACCURACY)
    sketch.merge(DDSketchProto.from_proto(pb.DDSketch.FromString(blob)))
    return sketch


class LiveStats:
    """Mergeable, fixed-size statistics of a stream of results: the same figures as :func:`summarize`.

    Means, counts and rates are exact; quantiles come from one DDSketch per
    metric (relative error at most :data:`SKETCH_RELATIVE_ACCURACY`), so memory
    does not grow with the number of requests. Used for everything live (Locust
    rows, the web UI, the end-of-run line); the reports use :func:`summarize` on
    the raw log. Inter-token gaps (one value per token) are left to the reports.
    Merged with :meth:`merge`; :meth:`to_wire` / :meth:`from_wire` carry it between
    processes (a distributed run's workers to its master).
    """

    METRICS = tuple(m for m in METRICS if not m.many)

    def __init__(self) -> None:
        self.requests = self.failures = self.tokens = 0
        self.slo_met: int | None = None
        self.cancelled: int | None = None
        self.first: float | None = None
        self.last: float | None = None
        self.sketches = {m.name: DDSketch(SKETCH_RELATIVE_ACCURACY) for m in self.METRICS}
        self.sums = {m.name: 0.0 for m in self.METRICS}
        self.maxima: dict[str, float] = {}
        self.tally = FailureTally()

    def add(self, result: RequestResult, metrics: RequestMetrics | None = None) -> None:
        if result.warmup:
            return
        self.requests += 1
        self.tally.add(result)
        if result.cancel_after or result.cancelled:
            self.cancelled = (self.cancelled or 0) + result.cancelled
        if result.slo_ok is not None:
            self.slo_met = (self.slo_met or 0) + bool(result.slo_ok)
        if result.cancelled:
            return
        m = metrics or request_metrics(result)
        if not result.success:
            self.failures += 1
            self._add_values(FAILURE_METRICS, m)
            return
        self.tokens += m.output_tokens
        end = result.start_time + m.e2e
        self.first = result.start_time if self.first is None else min(self.first, result.start_time)
        self.last = end if self.last is None else max(self.last, end)
        self._add_values(self.METRICS, m)

    def _add_values(self, metrics: Iterable[Metric], m: RequestMetrics) -> None:
        for metric in metrics:
            sketch = self.sketches[metric.name]
            for value in metric.values(m):
                sketch.add(value)  # a value below 0 (a residual, a tail) goes to the sketch's negative store
                self.sums[metric.name] += value
                if value > self.maxima.get(metric.name, float("-inf")):
                    self.maxima[metric.name] = value

    def merge(self, other: "LiveStats") -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.tokens += other.tokens
        self.tally.merge(other.tally)
        if other.slo_met is not None:
            self.slo_met = (self.slo_met or 0) + other.slo_met
        if other.cancelled is not None:
            self.cancelled = (self.cancelled or 0) + other.cancelled
        for attr, pick in (("first", min), ("last", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
        for name, sketch in other.sketches.items():
            if sketch.count:
                self.sketches[name].merge(sketch)
            self.sums[name] += other.sums[name]
            if name in other.maxima:
                self.maxima[name] = max(self.maxima.get(name, float("-inf")), other.maxima[name])

    def to_wire(self) -> dict:
        """A plain dict (numbers, strings, bytes) for Locust's messages; :meth:`from_wire` reads it back."""
        return {"requests": self.requests, "failures": self.failures, "tokens": self.tokens, "slo_met": self.slo_met,
                "cancelled": self.cancelled, "first": self.first, "last": self.last, "maxima": dict(self.maxima),
                "tally": self.tally.to_wire(),
                "sums": {name: value for name, value in self.sums.items() if self.sketches[name].count},
                "sketches": {name: sketch_to_bytes(s) for name, s in self.sketches.items() if s.count}}

    @classmethod
    def from_wire(cls, data: dict) -> "LiveStats":
        stats = cls()
        stats.requests, stats.failures, stats.tokens = data["requests"], data["failures"], data["tokens"]
        stats.slo_met, stats.first, stats.last = data["slo_met"], data["first"], data["last"]
        stats.cancelled = data.get("cancelled")
        stats.tally = FailureTally.from_wire(data.get("tally"))
        stats.maxima = dict(data["maxima"])
        for name, blob in data["sketches"].items():
            if name in stats.sketches:  # a metric this version does not know is refused with the worker, not here
                stats.sketches[name].merge(sketch_from_bytes(blob))
                stats.sums[name] = data["sums"][name]
        return stats

    def _stat(self, metric: Metric, stat: str) -> float | None:
        sketch = self.sketches.get(metric.name)
        if sketch is None or not sketch.count:
            return None
        if stat == "mean":
            return self.sums[metric.name] / sketch.count
        if stat == "max":
            return self.maxima[metric.name]
        return sketch.get_quantile_value(float(stat[1:]) / 100.0)

    def summary(self) -> RunSummary:
        distributions = {m.name: {s: self._stat(m, s) for s in m.stats} for m in METRICS}
        return _summary(self.requests, self.failures, self.first, self.last, self.tokens, self.slo_met,
                        distributions, exact=False, cancelled=self.cancelled, tally=FailureTally.from_wire(self.tally.to_wire()))
