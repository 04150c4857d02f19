"""``--otel-endpoint URL``: one OpenTelemetry client span per finished request, exported over OTLP/HTTP.

Each process that sends requests (a standalone run, or each worker of a
distributed one) exports its own requests' spans. The span of a request has
its ``request_id`` as trace id and its ``span_id`` as span id (the
``traceparent`` the request carried, so a server that traces, such as vLLM
with ``--otlp-traces-endpoint``, puts its spans under it), starts at the send
and ends at the end, marks the first token with an event, and carries the
request's figures as attributes: the OpenTelemetry GenAI names where they fit
(``gen_ai.operation.name``, ``gen_ai.request.model``, ``gen_ai.usage.*``,
``gen_ai.response.time_to_first_chunk``, ``error.type``, ``server.*``) and
``llmload.*`` for the rest (the catalogue's figures, in its units).

The request's own greenlet only appends the result to a queue. A native
thread (not a greenlet: building and encoding spans would stall the loop
that stamps tokens) makes the spans with the OpenTelemetry SDK and hands them
to a ``BatchSpanProcessor`` with the OTLP/HTTP exporter, which honour the
``OTEL_BSP_*``, ``OTEL_EXPORTER_OTLP_TRACES_*`` (headers, timeout,
compression, certificates), ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_TRACES_SAMPLER`` variables as every
OpenTelemetry SDK does. An endpoint that cannot be reached is said in one
warning line; the run goes on, and the raw log has every request either way.
At the end the spans left are flushed for at most :data:`CLOSE_S` seconds.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import logging
import os
import socket
import time
from urllib.parse import urlsplit, urlunsplit

from gevent import monkey

from llmload import __version__
from llmload.core.metrics import METRICS, RequestMetrics, RequestResult
from llmload.core.spans import CLIENT_SERVICE

log = logging.getLogger("llmload")

TRACES_PATH = "/v1/traces"
#: Seconds the exporter may spend on one batch, its retries included (unless OTEL_EXPORTER_OTLP_*TIMEOUT says).
EXPORT_TIMEOUT_S = 5.0
#: Seconds the end of the run waits for the last spans (1 s once the endpoint has failed).
CLOSE_S = 5.0
#: Seconds between two looks of the exporting thread at the queue.
POLL_S = 0.2
#: Spans the exporting thread makes before it lets the loop have the interpreter (about 0.1 ms each).
SPANS_PER_TURN = 8
#: The GenAI operation of each API style.
OPERATIONS = {"completion": "text_completion", "chat": "chat", "responses": "chat"}
#: The event at the first output chunk.
FIRST_TOKEN = "llmload.first_token"
#: The exporter's loggers: their retry and failure lines are replaced by this module's one warning.
QUIET_LOGGERS = ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry.sdk._shared_internal")


def otlp_url(text: str) -> str:
    """``--otel-endpoint``'s type: an http(s) URL; a bare ``http://host:4318`` gets ``/v1/traces`` (OTLP's rule
    for a base endpoint), a URL with a path is used as given; '' is off."""
    if not text.strip():
        return ""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL (e.g. http://localhost:4318)")
    try:
        parts.port
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} has a bad port") from None
    path = parts.path if parts.path not in ("", "/") else TRACES_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def otel_available() -> bool:
    """The OpenTelemetry SDK and its OTLP/HTTP exporter are installed (the ``otel`` extra)."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"))


def span_name(result: RequestResult, model: str) -> str:
    """``{gen_ai.operation.name} {gen_ai.request.model}``, as the GenAI conventions name a client span."""
    operation = OPERATIONS.get(result.api, result.api)
    return f"{operation} {model}" if model else operation


def span_attributes(result: RequestResult, metrics: RequestMetrics, model: str, host: str) -> dict:
    """The attributes of a request's client span (values None are left out)."""
    server = urlsplit(host) if host else None
    failed = result.failed
    attributes = {
        "gen_ai.operation.name": OPERATIONS.get(result.api, result.api),
        "gen_ai.request.model": model or None,
        "gen_ai.request.stream": result.mode == "stream",
        "gen_ai.usage.input_tokens": result.prompt_tokens,
        "gen_ai.usage.output_tokens": result.output_tokens,
        "gen_ai.usage.reasoning.output_tokens": result.reasoning_tokens,
        "gen_ai.response.time_to_first_chunk": metrics.ttft,
        "server.address": server.hostname if server else None,
        "server.port": (server.port or (443 if server.scheme == "https" else 80)) if server else None,
        "http.response.status_code": result.status_code or None,
        "error.type": (str(result.status_code) if result.status_code >= 400 else "_OTHER") if failed else None,
        "llmload.task": result.task,
        "llmload.api": result.api,
        "llmload.mode": result.mode,
        "llmload.success": result.success,
        "llmload.error": result.error or None,
        "llmload.prompt_id": result.prompt_id or None,
        "llmload.worker": result.worker or None,
        "llmload.warmup": result.warmup,
        "llmload.cancelled": result.cancelled or None,
        "llmload.turn": result.turn,
        "llmload.slo_ok": result.slo_ok,
        "llmload.output_tokens": metrics.output_tokens,
        "llmload.output_tokens_source": result.output_tokens_source,
        "llmload.flags": list(result.flags) or None,
    }
    for metric in METRICS:  # the catalogue's per-request figures, in its units (s, tok, tok/s)
        if not metric.many:
            attributes[f"llmload.{metric.name}"] = metric.value(metrics)
    return {key: value for key, value in attributes.items() if value is not None}


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _hex_id(text: str, digits: int) -> int | None:
    """A W3C id in hex (``digits`` long, not all zeros) as an int; None when ``text`` is not one."""
    if len(text) != digits:
        return None
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return value or None


class ClientSpans:
    """Exports one span per result handed to :meth:`add`, from a native thread (see the module doc)."""

    def __init__(self, endpoint: str, host: str = "", worker: str = ""):
        self.endpoint = endpoint
        self.host = host
        self.worker = worker
        self._queue: collections.deque = collections.deque()
        self._stopping = False
        self._finished = False
        self._started = False
        self.problem = ""  # why spans could not be exported (set by the thread, said once by the process)
        self._said = False
        self.made = 0  # spans made (handed to the batch processor)
        self.exported = 0  # spans the endpoint took
        self.failed = 0  # spans it did not
        self._tracer = None

    def start(self) -> None:
        """Make the tracer here (before the users start: imports and set-up would hold the loop up) and start the
        exporting thread, a native one also under gevent's monkey patching."""
        if self._started:
            return
        self._started = True
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        try:
            self._tracer = self._make_tracer()
        except Exception as exc:  # noqa: BLE001 - the run goes on without spans; said once
            self.problem = f"cannot set up the exporter ({exc}), spans are not exported"
            self._finished = True
            return
        monkey.get_original("_thread", "start_new_thread")(self._run, ())

    def add(self, result: RequestResult, metrics: RequestMetrics, model: str) -> None:
        """Queue one finished request's span (the caller's greenlet does nothing more)."""
        if self.problem and not self._said:
            self.say()
        if not self._finished:  # a thread that has stopped takes nothing more: the queue never grows unread
            self._queue.append((result, metrics, model))

    def say(self) -> None:
        """Log the one warning, once, from the caller's thread (the exporting thread never logs)."""
        if self.problem and not self._said:
            self._said = True
            log.warning(f"llmload: --otel-endpoint {self.endpoint}: {self.problem}; the run goes on and the raw log "
                        "keeps every request")

    def close(self, wait: float = CLOSE_S) -> None:
        """Flush what is left, for at most ``wait`` seconds (1 s once the endpoint failed), then let it be."""
        if not self._started:
            return
        self._stopping = True
        began = time.monotonic()
        while not self._finished and time.monotonic() - began < (min(wait, 1.0) if self.problem else wait):
            time.sleep(0.05)  # a greenlet's sleep under Locust: the users' loop goes on meanwhile
        lost = self.made + len(self._queue) - self.exported
        if lost and not self.problem:
            self.problem = (f"{lost} of {self.made + len(self._queue)} spans were not exported (not within {wait:g} s "
                            "of the end, or the batch queue was full: OTEL_BSP_MAX_QUEUE_SIZE)")
        self.say()
        log.info(f"llmload: {self.exported} of {self.made + len(self._queue)} spans exported to {self.endpoint}")

    # ------------------------------------------------------------------ the exporting thread

    def _run(self) -> None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor  # the otel extra, loaded by start()

        try:
            provider, exporter, tracer, ids = self._tracer
            processor = BatchSpanProcessor(exporter)  # made here: its worker is a thread of this thread
            provider.add_span_processor(processor)
            self._probe()
            while True:
                stopping = self._stopping
                done = 0
                while self._queue:
                    self._make_span(tracer, ids, *self._queue.popleft())
                    done += 1
                    if done % SPANS_PER_TURN == 0:
                        time.sleep(0.001)  # let the loop have the interpreter
                if stopping:
                    break
                time.sleep(POLL_S)
            processor.shutdown()  # the batch processor exports what it holds, then stops
        except Exception as exc:  # noqa: BLE001 - the run goes on without spans; said once
            self.problem = self.problem or f"span export stopped ({exc}), spans are lost"
        finally:
            self._finished = True

    def _make_tracer(self):
        """(provider, exporter, tracer, ids): the SDK's tracer over this process's resource, and the exporter."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # the otel extra
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SpanExportResult
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

        owner = self

        class Ids(RandomIdGenerator):
            """The ids of the span being made: the request's own (random where it has none)."""

            trace_id: int | None = None
            span_id: int | None = None

            def generate_trace_id(self) -> int:
                return self.trace_id or super().generate_trace_id()

            def generate_span_id(self) -> int:
                return self.span_id or super().generate_span_id()

        class Watched(OTLPSpanExporter):
            """The OTLP/HTTP exporter, counting what it exported and what it could not."""

            def export(self, spans):
                result = super().export(spans)
                if result == SpanExportResult.SUCCESS:
                    owner.exported += len(spans)
                else:
                    owner.failed += len(spans)
                    owner.problem = owner.problem or ("an export failed (refused, an error, or no answer within the "
                                                      "exporter's timeout), spans are lost")
                return result

        timeout_set = any(os.environ.get(v) for v in ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"))
        exporter = Watched(endpoint=self.endpoint, timeout=None if timeout_set else EXPORT_TIMEOUT_S)
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or CLIENT_SERVICE,
                                    "service.version": __version__, "host.name": socket.gethostname(),
                                    **({"llmload.worker": self.worker} if self.worker else {})})
        ids = Ids()
        provider = TracerProvider(resource=resource, id_generator=ids, shutdown_on_exit=False)
        return provider, exporter, provider.get_tracer("llmload", __version__), ids

    def _probe(self) -> None:
        """Say at once when nothing listens at the endpoint (the exporter would say so only after its retries)."""
        parts = urlsplit(self.endpoint)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=2.0).close()
        except OSError as exc:
            self.problem = f"cannot connect to {parts.hostname}:{port} ({exc.strerror or exc}), spans are not exported"

    def _make_span(self, tracer, ids, result: RequestResult, metrics: RequestMetrics, model: str) -> None:
        from opentelemetry.context import Context  # the otel extra, loaded by start()
        from opentelemetry.trace import SpanKind, Status, StatusCode

        ids.trace_id = _hex_id(result.request_id, 32)
        ids.span_id = _hex_id(result.span_id, 16)
        try:
            span = tracer.start_span(span_name(result, model), context=Context(), kind=SpanKind.CLIENT,
                                     start_time=_ns(result.start_time),
                                     attributes=span_attributes(result, metrics, model, self.host))
        finally:
            ids.trace_id = ids.span_id = None
        if not span.is_recording():  # sampled out (OTEL_TRACES_SAMPLER)
            return
        self.made += 1
        if result.token_offsets:
            span.add_event(FIRST_TOKEN, timestamp=_ns(result.start_time + result.token_offsets[0]))
        if result.failed:
            span.set_status(Status(StatusCode.ERROR, result.error or None))
        span.end(end_time=_ns(result.start_time + result.end_offset))
