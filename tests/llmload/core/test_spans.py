"""Spans: OTLP bodies (protobuf and JSON, built with opentelemetry-proto) decoded, spans.jsonl, and the join to
results by trace id with its counts; the in-process receiver over real HTTP, fed by the SDK's own exporter."""

from __future__ import annotations

import base64
import gzip
import json
import os
import urllib.error
import urllib.request

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from llmload.core.metrics import RequestResult
from llmload.core.otlp import SpanReceiver
from llmload.core.spans import (JSON, PROTOBUF, SpanDecodeError, SpanRecord, append_spans, decode_otlp, join_file,
                                join_spans, read_spans)

pytestmark = pytest.mark.unit

#: vLLM's llm_request attributes (seconds), as vllm/v1/engine/output_processor.py sets them.
VLLM_LATENCY = {"gen_ai.latency.time_in_queue": 0.002, "gen_ai.latency.time_to_first_token": 0.050,
                "gen_ai.latency.e2e": 0.300, "gen_ai.latency.time_in_model_prefill": 0.040,
                "gen_ai.latency.time_in_model_decode": 0.250, "gen_ai.latency.time_in_model_inference": 0.290}


def trace_id() -> str:
    return os.urandom(16).hex()


def request(spans: list[dict], service: str = "vllm") -> ExportTraceServiceRequest:
    """An ExportTraceServiceRequest of one resource (``service``) holding ``spans`` (dicts of the span's fields)."""
    body = ExportTraceServiceRequest()
    resource_spans = body.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", service
    scope = resource_spans.scope_spans.add()
    for fields in spans:
        span = scope.spans.add()
        span.trace_id = bytes.fromhex(fields["trace_id"])
        span.span_id = bytes.fromhex(fields.get("span_id", os.urandom(8).hex()))
        if fields.get("parent"):
            span.parent_span_id = bytes.fromhex(fields["parent"])
        span.name = fields.get("name", "llm_request")
        span.kind = fields.get("kind", Span.SPAN_KIND_SERVER)
        span.start_time_unix_nano, span.end_time_unix_nano = 1_000_000_000, 1_300_000_000
        for key, value in fields.get("attributes", {}).items():
            pair = span.attributes.add()
            pair.key = key
            if isinstance(value, bool):
                pair.value.bool_value = value
            elif isinstance(value, int):
                pair.value.int_value = value
            elif isinstance(value, float):
                pair.value.double_value = value
            else:
                pair.value.string_value = value
        event = span.events.add()
        event.name, event.time_unix_nano = "first", 1_050_000_000
    return body


def otlp_json(body: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: protobuf's JSON mapping, but ids in hex (not base64) as the OTLP specification says."""
    data = json_format.MessageToDict(body)
    for resource_spans in data["resourceSpans"]:
        for scope in resource_spans["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data).encode()


def result(request_id: str, **kw) -> RequestResult:
    return RequestResult(request_id, "qa", "chat", "stream", 1000.0, 0.5, [0.1], output_tokens=4, **kw)


# ---------------------------------------------------------------------- decoding


def test_protobuf_and_json_bodies_decode_to_the_same_records():
    trace, parent = trace_id(), os.urandom(8).hex()
    body = request([{"trace_id": trace, "span_id": "00f067aa0ba902b7", "parent": parent,
                     "attributes": {**VLLM_LATENCY, "gen_ai.request.id": "chatcmpl-x", "gen_ai.usage.prompt_tokens": 12,
                                    "flag": True}}])
    from_protobuf = decode_otlp(body.SerializeToString(), PROTOBUF)
    from_json = decode_otlp(otlp_json(body), JSON + "; charset=utf-8")
    assert from_protobuf == from_json
    (span,) = from_protobuf
    assert (span.trace_id, span.span_id, span.parent_span_id) == (trace, "00f067aa0ba902b7", parent)
    assert (span.name, span.kind, span.service_name) == ("llm_request", "server", "vllm")
    assert (span.start_unix_nano, span.end_unix_nano) == (1_000_000_000, 1_300_000_000)
    assert span.attributes["gen_ai.usage.prompt_tokens"] == 12 and span.attributes["flag"] is True
    assert span.attributes["gen_ai.latency.e2e"] == pytest.approx(0.3)
    assert span.events == [{"name": "first", "time_unix_nano": 1_050_000_000, "attributes": {}}]
    assert span.timing == {"time_in_queue_ms": pytest.approx(2.0), "time_to_first_token_ms": pytest.approx(50.0),
                           "e2e_ms": pytest.approx(300.0), "time_in_model_prefill_ms": pytest.approx(40.0),
                           "time_in_model_decode_ms": pytest.approx(250.0),
                           "time_in_model_inference_ms": pytest.approx(290.0)}


@pytest.mark.parametrize("body, kind, said", [
    (b"\xff\xff\xff", PROTOBUF, "not an OTLP"),
    (b"{not json", JSON, "not an OTLP"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', JSON, "traceId 'zz' is not hex"),
    (b"", "text/plain", "content type 'text/plain'"),
])
def test_a_body_that_is_not_otlp_is_one_clear_error(body, kind, said):
    with pytest.raises(SpanDecodeError, match=said):
        decode_otlp(body, kind)


def test_spans_jsonl_round_trips_and_a_cut_last_line_is_skipped(tmp_path):
    records = decode_otlp(request([{"trace_id": trace_id(), "attributes": VLLM_LATENCY}] * 2).SerializeToString())
    path = tmp_path / "cell_spans.jsonl"
    with path.open("w") as handle:
        assert append_spans(handle, records) == 2
    assert read_spans(path) == records
    with path.open("a") as handle:
        handle.write('{"trace_id": "ab')  # a kill mid-line
    assert read_spans(path) == records
    path.write_text('{"trace_id": 1}\n' + records[0].to_json() + "\n")
    with pytest.raises(ValueError, match=r"cell_spans.jsonl:1: not a span record"):
        read_spans(path)


# ---------------------------------------------------------------------- the join


def span(trace: str, service: str = "vllm", kind: str = "server", attributes: dict | None = None) -> SpanRecord:
    return SpanRecord(trace, os.urandom(8).hex(), "", "llm_request", kind, 1, 2,
                      VLLM_LATENCY if attributes is None else attributes, service)


def test_the_join_fills_server_spans_in_ms_and_counts_what_it_could_not_join():
    ids = [trace_id() for _ in range(6)]
    results = [result(i) for i in ids[:4]] + [result(ids[3])]  # ids[3]: two results, one trace id
    spans = [span(ids[0]), span(ids[1]),
             span(ids[2]), span(ids[2]),  # two request spans on one trace: which is it? neither
             span(ids[3]),
             span(ids[5]),  # a span of no request of this cell
             span(ids[0], service="llmload", kind="client", attributes={"llmload.ttft": 0.1}),  # the client's own
             span(ids[1], kind="internal", attributes={"code.function": "load_model"})]  # vLLM's start-up
    join = join_spans(results, spans)
    assert results[0].server_spans == {"time_in_queue_ms": pytest.approx(2.0),
                                       "time_to_first_token_ms": pytest.approx(50.0), "e2e_ms": pytest.approx(300.0),
                                       "time_in_model_prefill_ms": pytest.approx(40.0),
                                       "time_in_model_decode_ms": pytest.approx(250.0),
                                       "time_in_model_inference_ms": pytest.approx(290.0)}
    assert results[1].server_spans is not None
    assert [r.server_spans for r in results[2:]] == [None, None, None]  # never joined wrongly
    assert join.to_dict() == {"joined": 2, "requests_without_span": 0, "spans_without_request": 1,
                              "duplicate_ids": 2, "client_spans": 1, "other_spans": 1}


def test_a_result_without_a_span_is_counted_and_a_client_span_never_joins():
    ids = [trace_id(), trace_id()]
    results = [result(ids[0]), result(ids[1])]
    join = join_spans(results, [span(ids[0], service="llmload", kind="client", attributes=VLLM_LATENCY)])
    assert [r.server_spans for r in results] == [None, None]
    assert (join.joined, join.requests_without_span, join.client_spans) == (0, 2, 1)


def test_join_file_is_none_without_a_spans_file(tmp_path):
    assert join_file([result(trace_id())], tmp_path / "none_spans.jsonl") is None


# ---------------------------------------------------------------------- the receiver


def post(url: str, body: bytes, kind: str, encoding: str = "") -> tuple[int, bytes]:
    headers = {"Content-Type": kind, **({"Content-Encoding": encoding} if encoding else {})}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_receiver_routes_spans_to_files_and_waits_for_trace_ids(tmp_path):
    cell, other = tmp_path / "a" / "cell_spans.jsonl", tmp_path / "spans.jsonl"
    ids = [trace_id() for _ in range(3)]
    with SpanReceiver(fallback=other) as receiver:
        assert receiver.url.startswith("http://127.0.0.1:") and receiver.url.endswith("/v1/traces")
        assert post(receiver.url, request([{"trace_id": ids[0]}]).SerializeToString(), PROTOBUF) == (200, b"")
        receiver.route(cell)
        body = request([{"trace_id": ids[1]}, {"trace_id": ids[2]}])
        assert post(receiver.url, gzip.compress(otlp_json(body)), JSON, "gzip") == (200, b"{}")
        assert receiver.wait_for(ids[1:], timeout=5) == set()
        assert receiver.wait_for([ids[0]], timeout=0.2) == {ids[0]}  # came before the route
        receiver.route(None)
        assert post(receiver.url, b"garbage", PROTOBUF)[0] == 400
        assert post(receiver.url.replace("/v1/traces", "/v1/logs"), b"", PROTOBUF)[0] == 404
        assert receiver.spans == 3 and receiver.bad == 1
    assert [s.trace_id for s in read_spans(cell)] == ids[1:]
    assert [s.trace_id for s in read_spans(other)] == ids[:1]


def test_the_sdks_own_otlp_http_exporter_delivers_to_the_receiver(tmp_path):
    """The OpenTelemetry SDK's exporter (as vLLM and the load generator use it) against the receiver."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    path = tmp_path / "spans.jsonl"
    with SpanReceiver(fallback=path) as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}), shutdown_on_exit=False)
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url, timeout=5)))
        with provider.get_tracer("test").start_as_current_span("llm_request", kind=SpanKind.SERVER,
                                                               attributes=VLLM_LATENCY) as made:
            context = made.get_span_context()
        provider.shutdown()
    (got,) = read_spans(path)
    assert (got.trace_id, got.span_id) == (f"{context.trace_id:032x}", f"{context.span_id:016x}")
    assert got.service_name == "vllm" and got.is_request_span and got.timing["e2e_ms"] == pytest.approx(300.0)
