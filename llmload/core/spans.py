"""OpenTelemetry spans: one record per span (``spans.jsonl``), OTLP/HTTP bodies decoded, and the join to results.

A span is kept as a :class:`SpanRecord`, one JSON object per line of a
``spans.jsonl`` file (the runner's receiver writes one per cell, beside its
raw log; :mod:`llmload.core.otlp`). :func:`decode_otlp` turns the body of an
OTLP/HTTP ``POST /v1/traces`` (an ``ExportTraceServiceRequest``, protobuf or
JSON) into records; it needs the ``opentelemetry-proto`` package (the ``otel``
extra), imported when called. Nothing here opens a socket.

The join (:func:`join_spans`) is done when a cell is read, never written into
the raw log: a result's ``request_id`` is the W3C trace id of its request
(``traceparent``), so the server's request span with that trace id belongs to
it. vLLM's request span (``llm_request``, kind server) carries its timing as
``gen_ai.latency.*`` attributes in seconds; the join sets
``RequestResult.server_spans`` to them in milliseconds, named without the
prefix and with ``_ms`` (``time_in_queue_ms``, ``time_to_first_token_ms``,
``e2e_ms``, ``time_in_model_prefill_ms``, ...). A trace id held by two
results, or by two request spans, joins nothing and is counted. The load
generator's own client spans (``--otel-endpoint``: service ``llmload``, kind
client) are told apart and never joined as server spans.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from llmload.core.metrics import RequestResult
from llmload.core.records import known_fields

#: The service name of the load generator's own spans (``--otel-endpoint``; ``OTEL_SERVICE_NAME`` may rename it).
CLIENT_SERVICE = "llmload"
#: The attribute prefix of a server's per-request timing (vLLM's ``llm_request`` span), in seconds.
LATENCY_PREFIX = "gen_ai.latency."
#: OTLP's span kinds, by their number in the protocol.
KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
#: Content types of the two OTLP/HTTP encodings.
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: The id fields of OTLP/JSON (hex there, base64 in protobuf's own JSON mapping).
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class SpanDecodeError(ValueError):
    """A body that is not an OTLP ``ExportTraceServiceRequest`` (one line)."""


@dataclass
class SpanRecord:
    """One span as ``spans.jsonl`` keeps it (ids in lowercase hex, times in Unix nanoseconds)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str  # one of KINDS
    start_unix_nano: int
    end_unix_nano: int
    attributes: dict = field(default_factory=dict)
    service_name: str = ""
    events: list = field(default_factory=list)  # [{"name", "time_unix_nano", "attributes"}], in order

    @property
    def is_client(self) -> bool:
        """A client span: the load generator's own (or any span of kind client)."""
        return self.kind == "client" or self.service_name == CLIENT_SERVICE

    @property
    def timing(self) -> dict[str, float]:
        """The ``gen_ai.latency.*`` attributes in ms, keyed without the prefix plus ``_ms``."""
        return {key[len(LATENCY_PREFIX):] + "_ms": float(value) * 1000.0 for key, value in self.attributes.items()
                if key.startswith(LATENCY_PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool)}

    @property
    def is_request_span(self) -> bool:
        """A server's span of one request: not a client span, and it carries the request's timing."""
        return not self.is_client and bool(self.timing)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> "SpanRecord":
        return cls(**known_fields(cls, data))


# ---------------------------------------------------------------------- OTLP bodies


def decode_otlp(body: bytes, content_type: str = PROTOBUF) -> list[SpanRecord]:
    """The spans of an OTLP/HTTP traces body (``content_type`` protobuf or JSON); :class:`SpanDecodeError` if not."""
    from google.protobuf import json_format  # protobuf: with opentelemetry-proto (the otel extra)
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    kind = (content_type or PROTOBUF).split(";")[0].strip().lower()
    try:
        if kind == JSON:
            json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request, ignore_unknown_fields=True)
        elif kind == PROTOBUF:
            request.ParseFromString(body)
        else:
            raise SpanDecodeError(f"content type {content_type!r}: OTLP/HTTP is {PROTOBUF} or {JSON}")
    except (DecodeError, json_format.ParseError, ValueError, TypeError, AttributeError) as exc:
        if isinstance(exc, SpanDecodeError):
            raise
        raise SpanDecodeError(f"not an OTLP ExportTraceServiceRequest ({kind}): {exc}") from None
    records = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                records.append(SpanRecord(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(), parent_span_id=span.parent_span_id.hex(),
                    name=span.name, kind=KINDS[span.kind] if 0 <= span.kind < len(KINDS) else str(span.kind),
                    start_unix_nano=span.start_time_unix_nano, end_unix_nano=span.end_time_unix_nano,
                    attributes=_attributes(span.attributes), service_name=service,
                    events=[{"name": e.name, "time_unix_nano": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                            for e in span.events]))
    return records


def _hex_ids_to_base64(data):
    """OTLP/JSON spells trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    value = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError:
                    raise SpanDecodeError(f"{key} {value!r} is not hex") from None
            out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(data, list):
        return [_hex_ids_to_base64(item) for item in data]
    return data


def _attributes(pairs) -> dict:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value):
    """An OTLP ``AnyValue`` as a JSON value (bytes in hex)."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which == "bytes_value":
        return binascii.hexlify(value.bytes_value).decode("ascii")
    return getattr(value, which)


# ---------------------------------------------------------------------- spans.jsonl


def append_spans(handle, records: Iterable[SpanRecord]) -> int:
    """Write ``records`` as JSON lines to an open text file; how many."""
    lines = [record.to_json() + "\n" for record in records]
    handle.write("".join(lines))
    return len(lines)


def read_spans(path: str | Path) -> list[SpanRecord]:
    """The records of a ``spans.jsonl`` (a last line cut short by a kill is skipped; another bad line is an error)."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(SpanRecord.from_dict(json.loads(line)))
        except (json.JSONDecodeError, TypeError) as exc:
            if number == len(lines) and not text.endswith("\n"):
                break
            raise ValueError(f"{path}:{number}: not a span record ({exc})") from None
    return records


# ---------------------------------------------------------------------- the join


@dataclass
class SpanJoin:
    """What joining one cell's spans to its results found (counts of results and of spans)."""

    joined: int = 0  # results given their server span's timing
    requests_without_span: int = 0  # results with no server request span of their trace id
    spans_without_request: int = 0  # server request spans whose trace id is no result's
    duplicate_ids: int = 0  # trace ids held by two results or two request spans: joined to nothing
    client_spans: int = 0  # the load generator's own spans (never joined)
    other_spans: int = 0  # server spans that carry no request timing (e.g. vLLM's start-up)

    def to_dict(self) -> dict:
        return asdict(self)


def join_spans(results: list[RequestResult], spans: Iterable[SpanRecord]) -> SpanJoin:
    """Set each result's ``server_spans`` from the request span of its trace id (``request_id``); the counts."""
    join = SpanJoin()
    by_trace: dict[str, list[SpanRecord]] = {}
    for span in spans:
        if span.is_client:
            join.client_spans += 1
        elif span.is_request_span:
            by_trace.setdefault(span.trace_id, []).append(span)
        else:
            join.other_spans += 1
    ids = Counter(r.request_id for r in results)
    duplicates = {trace for trace, n in ids.items() if n > 1} | {t for t, found in by_trace.items() if len(found) > 1}
    join.duplicate_ids = len(duplicates)
    for result in results:
        found = by_trace.get(result.request_id)
        if result.request_id in duplicates or not found:
            if not found:
                join.requests_without_span += 1
            continue
        result.server_spans = found[0].timing
        join.joined += 1
    join.spans_without_request = sum(len(found) for trace, found in by_trace.items() if trace not in ids)
    return join


def join_file(results: list[RequestResult], path: str | Path) -> SpanJoin | None:
    """:func:`join_spans` with the spans of ``path``; None when there is no such file (no receiver ran)."""
    if not Path(path).is_file():
        return None
    return join_spans(results, read_spans(path))
