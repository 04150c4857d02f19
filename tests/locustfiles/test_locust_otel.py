"""--otel-endpoint in real Locust runs against the mock engine: one client span per request, received over
OTLP/HTTP by the in-process receiver, with the request's ids, times and figures; an endpoint where nothing listens
is one warning, and the run, its raw log and its exit are as without it."""

from __future__ import annotations

import time

import pytest

from llmload.core.metrics import request_metrics
from llmload.core.otlp import SpanReceiver
from llmload.core.rawlog import read_results
from llmload.core.services import free_port
from llmload.core.spans import read_spans
from llmload.loadgen.tracing import FIRST_TOKEN
from locust_helpers import output, run_locust, write_prompts

pytestmark = pytest.mark.integration

REQUESTS = 6


def test_each_request_is_one_client_span_received_over_otlp(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "qa.jsonl", "qa", count=4, max_tokens=8)
    raw = tmp_path / "run_requests.jsonl"
    with SpanReceiver(fallback=tmp_path / "spans.jsonl") as receiver:
        proc = run_locust("qa.py", fast_mock, "-u", "2", "-r", "2", "--requests", str(REQUESTS), "--dataset",
                          str(prompts), "--raw-log", str(raw), "--otel-endpoint", receiver.url)
    assert proc.returncode == 0, output(proc)
    assert "--otel-endpoint" not in output(proc)  # nothing to warn about
    results = read_results(raw)
    spans = read_spans(tmp_path / "spans.jsonl")
    assert len(results) == REQUESTS and len(spans) == REQUESTS  # all of them, flushed before Locust exited
    by_trace = {s.trace_id: s for s in spans}
    for r in results:
        s = by_trace[r.request_id]  # the request id is the trace id
        m = request_metrics(r)
        # the span id is the client span of the request's traceparent (llmload/core/client.py)
        assert s.span_id == r.span_id if r.span_id else len(s.span_id) == 16
        assert (s.kind, s.service_name, s.parent_span_id, s.name) == ("client", "llmload", "", "chat mock")
        assert s.start_unix_nano == pytest.approx(r.start_time * 1e9, abs=1e3)
        assert s.end_unix_nano == pytest.approx((r.start_time + r.end_offset) * 1e9, abs=1e3)
        assert [e["name"] for e in s.events] == [FIRST_TOKEN]
        assert s.events[0]["time_unix_nano"] == pytest.approx((r.start_time + r.token_offsets[0]) * 1e9, abs=1e3)
        a = s.attributes
        assert a["gen_ai.request.model"] == "mock" and a["gen_ai.usage.output_tokens"] == r.output_tokens == 8
        assert a["gen_ai.usage.input_tokens"] == r.prompt_tokens
        assert a["llmload.ttft"] == pytest.approx(m.ttft) == a["gen_ai.response.time_to_first_chunk"]
        assert a["llmload.e2e"] == pytest.approx(m.e2e) and a["llmload.tpot"] == pytest.approx(m.tpot)
        assert a["llmload.task"] == "qa" and a["http.response.status_code"] == 200 and a["llmload.success"]
        assert a["llmload.prompt_id"] == r.prompt_id and a["server.port"] == int(fast_mock.rsplit(":", 1)[1])


def test_each_worker_of_a_distributed_run_exports_its_own_requests(fast_mock, tmp_path):
    """Locust's --processes 2: the master sends no request and exports nothing; each worker its own spans."""
    prompts = write_prompts(tmp_path / "qa.jsonl", "qa", count=4, max_tokens=4)
    with SpanReceiver(fallback=tmp_path / "spans.jsonl") as receiver:
        proc = run_locust("qa.py", fast_mock, "--processes", "2", "-u", "4", "-r", "4", "-t", "60s", "--requests",
                          "12", "--model", "mock", "--dataset", str(prompts), "--csv", str(tmp_path / "procs"),
                          "--otel-endpoint", receiver.url, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in output(proc), output(proc)[-3000:]
    results = read_results(tmp_path / "procs_requests.jsonl")
    spans = read_spans(tmp_path / "spans.jsonl")
    assert sorted(s.trace_id for s in spans) == sorted(r.request_id for r in results) and len(results) == 12
    workers = {s.trace_id: s.attributes["llmload.worker"] for s in spans}
    assert all(workers[r.request_id] == r.worker for r in results) and len(set(workers.values())) == 2


@pytest.mark.serial
def test_an_endpoint_where_nothing_listens_is_one_warning_and_nothing_lost(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "qa.jsonl", "qa", count=4, max_tokens=8)
    raw = tmp_path / "run_requests.jsonl"
    began = time.monotonic()
    proc = run_locust("qa.py", fast_mock, "-u", "2", "-r", "2", "--requests", str(REQUESTS), "--dataset",
                      str(prompts), "--raw-log", str(raw), "--otel-endpoint", f"http://127.0.0.1:{free_port()}")
    took = time.monotonic() - began
    text = output(proc)
    assert proc.returncode == 0, text
    warnings = [line for line in text.splitlines() if "--otel-endpoint" in line]
    assert len(warnings) == 1 and "Connection refused" in warnings[0] and "WARNING" in warnings[0], text
    assert "Traceback" not in text and "opentelemetry" not in text.replace(warnings[0], "")
    assert len(read_results(raw)) == REQUESTS and all(r.success for r in read_results(raw))
    # the end waits 1 s for spans once the endpoint failed, never the exporter's retries (5 s a batch) or an
    # exit handler's flush (30 s): Locust's start, 6 requests of ~90 ms and that second take ~3-4 s here
    assert took < 12, f"{took:.1f} s"


def test_an_endpoint_that_is_no_url_is_one_line_and_exit_code_2(fast_mock, tmp_path):
    proc = run_locust("qa.py", fast_mock, "--requests", "1", "--otel-endpoint", "localhost:4318")
    assert proc.returncode == 2
    assert output(proc).strip().splitlines()[-1] == ("error: argument --otel-endpoint: 'localhost:4318' is not an "
                                                      "http(s) URL (e.g. http://localhost:4318)")
