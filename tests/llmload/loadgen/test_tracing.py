"""--otel-endpoint's parts without Locust: the URL, a span's name and attributes, and ClientSpans exporting to the
in-process receiver from its own thread (ids, times, the first-token event), or saying once that it cannot."""

from __future__ import annotations

import argparse
import os
import time

import pytest

from llmload.core.metrics import RequestResult, request_metrics
from llmload.core.otlp import SpanReceiver
from llmload.core.services import free_port
from llmload.core.spans import read_spans
from llmload.loadgen.tracing import FIRST_TOKEN, ClientSpans, otlp_url, span_attributes, span_name

pytestmark = pytest.mark.unit


def result(**kw) -> RequestResult:
    values = dict(request_id=os.urandom(16).hex(), task="qa", api="chat", mode="stream", start_time=1_800_000_000.25,
                  end_offset=0.5, token_offsets=[0.1, 0.2, 0.3, 0.4], output_tokens=4, output_tokens_source="usage",
                  prompt_tokens=12, status_code=200, prompt_id="qa-3", span_id=os.urandom(8).hex())
    return RequestResult(**{**values, **kw})


@pytest.mark.parametrize("text, url", [
    ("http://localhost:4318", "http://localhost:4318/v1/traces"),
    ("http://localhost:4318/", "http://localhost:4318/v1/traces"),
    ("https://tempo.example:443/otlp/v1/traces", "https://tempo.example:443/otlp/v1/traces"),
    ("", ""),
])
def test_an_endpoint_without_a_path_gets_otlps_traces_path(text, url):
    assert otlp_url(text) == url


@pytest.mark.parametrize("text", ["localhost:4318", "grpc://collector:4317", "http://:4318", "http://h:port"])
def test_an_endpoint_that_is_no_http_url_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="http"):
        otlp_url(text)


def test_a_spans_attributes_are_the_requests_figures_under_genai_and_llmload_names():
    r = result(flags=["usage_zero"], worker="w1")
    m = request_metrics(r)
    attributes = span_attributes(r, m, "mock", "http://127.0.0.1:8000")
    assert span_name(r, "mock") == "chat mock" and span_name(result(api="completion"), "") == "text_completion"
    assert attributes["gen_ai.operation.name"] == "chat" and attributes["gen_ai.request.model"] == "mock"
    assert attributes["gen_ai.request.stream"] is True
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (12, 4)
    assert attributes["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.1) == attributes["llmload.ttft"]
    assert (attributes["server.address"], attributes["server.port"]) == ("127.0.0.1", 8000)
    assert attributes["llmload.e2e"] == pytest.approx(m.e2e) and attributes["llmload.tpot"] == pytest.approx(m.tpot)
    assert attributes["llmload.task"] == "qa" and attributes["llmload.prompt_id"] == "qa-3"
    assert attributes["llmload.flags"] == ["usage_zero"] and attributes["llmload.worker"] == "w1"
    assert "error.type" not in attributes and "llmload.error" not in attributes
    assert all(value is not None for value in attributes.values())
    failed = result(success=False, status_code=503, error="HTTP 503: busy", token_offsets=[], output_tokens=None)
    attributes = span_attributes(failed, request_metrics(failed), "mock", "https://h")
    assert attributes["error.type"] == "503" and attributes["llmload.error"] == "HTTP 503: busy"
    assert attributes["server.port"] == 443 and "gen_ai.response.time_to_first_chunk" not in attributes


def test_each_result_is_one_client_span_with_the_requests_ids_and_times(tmp_path):
    results = [result(), result(success=False, status_code=500, error="HTTP 500: boom", token_offsets=[]),
               result(span_id="", request_id="not-hex")]
    with SpanReceiver(fallback=tmp_path / "spans.jsonl") as receiver:
        spans = ClientSpans(receiver.url, "http://127.0.0.1:8000", worker="w1")
        spans.start()
        for r in results:
            spans.add(r, request_metrics(r), "mock")
        spans.close()
    assert spans.made == spans.exported == 3 and spans.failed == 0 and not spans.problem
    got = {s.trace_id: s for s in read_spans(tmp_path / "spans.jsonl")}
    for r in results[:2]:
        s = got[r.request_id]
        assert (s.span_id, s.parent_span_id, s.kind, s.service_name) == (r.span_id, "", "client", "llmload")
        assert s.start_unix_nano == pytest.approx(r.start_time * 1e9, abs=1e3)
        assert s.end_unix_nano - s.start_unix_nano == pytest.approx(r.end_offset * 1e9, abs=1e3)
        assert s.attributes["llmload.task"] == "qa" and s.name == "chat mock"
    first = got[results[0].request_id].events
    assert [e["name"] for e in first] == [FIRST_TOKEN]
    assert first[0]["time_unix_nano"] - got[results[0].request_id].start_unix_nano == pytest.approx(0.1e9, abs=1e3)
    assert got[results[1].request_id].events == [] and got[results[1].request_id].attributes["error.type"] == "500"
    (odd,) = [s for s in got.values() if s.trace_id not in (results[0].request_id, results[1].request_id)]
    assert len(odd.trace_id) == 32 and len(odd.span_id) == 16  # ids of its own where the request has none


@pytest.mark.serial  # a wall-clock bound
def test_an_endpoint_with_nothing_listening_is_one_problem_said_once_and_close_is_bounded(caplog):
    spans = ClientSpans(f"http://127.0.0.1:{free_port()}/v1/traces")
    spans.start()
    r = result()
    spans.add(r, request_metrics(r), "mock")
    began = time.monotonic()
    spans.close()
    assert time.monotonic() - began < 2.0  # 1 s once the endpoint failed, not the exporter's retries
    assert "cannot connect to 127.0.0.1" in spans.problem
    spans.say()
    warnings = [rec.getMessage() for rec in caplog.records if "--otel-endpoint" in rec.getMessage()]
    assert len(warnings) == 1 and "the raw log keeps every request" in warnings[0]
