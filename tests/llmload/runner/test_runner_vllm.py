"""One runner cell on a real vLLM server (the e2e tier): its own file, so that pytest-xdist starts it first, alone."""

from __future__ import annotations

import csv
import json

import pytest

from llmload.core.metrics import request_metrics
from llmload.core.rawlog import read_results
from llmload.core.spans import read_spans
from prompt_sets import make_data
from reports.explain import main as explain
from reports.report import saved_report
from reports.run import load_run
from runner_helpers import read_summary, run_runner

pytestmark = pytest.mark.e2e


def test_one_real_vllm_cell(tmp_path, default_model, capsys):
    """The vLLM deployment on a fresh machine: launcher, one Locust run, the monitor, the merge; vLLM's spans
    received by the runner (--otel-receiver) and joined to the cell's requests; its per-request metrics in every
    response, and the latency split into parts (the frontend from its span) in the report and llmload explain."""
    from server.vllm_launcher import vllm_installed  # only this test needs to know

    if not vllm_installed():
        pytest.skip("vLLM is not installed (LLMLOAD_VLLM=none)")
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "vllm", "--tasks", "qa", "--modes", "stream", "--concurrency", "2",
                      "--requests", "8", "--max-tokens", "32", "--data-dir", str(data), "--out", str(run_dir),
                      "--vllm-timeout", "900", "--repeat", "1", "--vllm-args=--enforce-eager",  # no torch.compile
                      "--otel-receiver",
                      timeout=1200)  # a few seconds of load: the monitor samples it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_summary(run_dir)
    assert row["status"] == "ok", row
    assert int(row["requests"]) == 8 and int(row["failures"]) == 0
    assert float(row["ttft_p50"]) > 0
    assert float(row["peak_server_rss_mib"]) > 200  # engine subprocess included
    raw = read_results(run_dir / "vllm" / "qa_stream_c2_requests.jsonl")
    assert all(r.output_tokens == 32 and r.output_tokens_source == "usage" for r in raw)
    # the cells repeat their prompts and the basic server has no prefix cache: vLLM runs without one too
    log = (run_dir / "vllm" / "server.log").read_text()
    assert "enable_prefix_caching=False" in log
    assert "enforce_eager=True" in log  # --vllm-args reached vLLM
    assert "'enable_per_request_metrics': True" in log and "otlp_traces_endpoint='http://127.0.0.1:" in log
    # vLLM's llm_request span of every request, received during the cell and joined by trace id (the request id)
    spans = read_spans(run_dir / "vllm" / "qa_stream_c2_spans.jsonl")
    assert {s.service_name for s in spans if s.is_request_span} == {"vllm"}
    parents = {s.trace_id: s.parent_span_id for s in spans if s.is_request_span}
    (cell,) = load_run(run_dir).cells
    assert cell.spans is not None and cell.spans.to_dict() == {
        "joined": 8, "requests_without_span": 0, "spans_without_request": 0, "duplicate_ids": 0, "client_spans": 0,
        "other_spans": cell.spans.other_spans}, cell.spans
    for r in cell.results:
        assert parents[r.request_id] == r.span_id  # vLLM's span is a child of the request's traceparent
        timing = r.server_spans
        assert {"time_in_queue_ms", "time_in_model_prefill_ms", "time_in_model_decode_ms", "e2e_ms"} <= set(timing)
        assert all(value >= 0 for value in timing.values()), timing
        # the server's own time from arrival to the last token fits inside what the client measured
        assert timing["time_in_queue_ms"] + timing["time_in_model_prefill_ms"] < r.end_offset * 1000.0
        assert timing["e2e_ms"] < r.end_offset * 1000.0 + 5.0, (timing, r.end_offset)
        # vLLM's metrics object (--enable-per-request-metrics) in the stream's usage chunk, the same durations
        assert {"queue_time_ms", "time_to_first_token_ms", "generation_time_ms"} <= set(r.server_timing or {}), r
        assert r.server_timing["time_to_first_token_ms"] == pytest.approx(timing["time_in_model_prefill_ms"], abs=1.0)
        m = request_metrics(r)  # the frontend from the span: its TTFT from arrival - queue - prefill
        assert None not in (m.frontend, m.queue, m.prefill, m.decode, m.ttft_residual, m.tail), m
        assert m.frontend == pytest.approx((timing["time_to_first_token_ms"] - timing["time_in_queue_ms"]
                                            - timing["time_in_model_prefill_ms"]) / 1000.0)
        assert m.frontend + m.queue + m.prefill < m.ttft + 0.005, m  # inside what the client measured
    (split,) = saved_report(run_dir).time_split  # the runner's own report, saved with the run
    assert (split.timed, split.requests, split.malformed) == (8, 8, 0) and split.frontend_known
    assert split.spans == {"joined": 8, "requests_without_span": 0, "spans_without_request": 0, "duplicate_ids": 0}
    assert [p.name for p in split.parts] == ["ttft_residual", "frontend", "queue", "prefill", "decode", "tail"]
    assert explain([str(run_dir)]) == 0 and "vllm qa stream: TTFT = client/network" in capsys.readouterr().out
    assert json.loads((run_dir / "run.json").read_text())["baseline"] == "vllm"
    # the monitor read vLLM's own /metrics beside its resources: requests running, KV cache in use
    with open(run_dir / "vllm" / "qa_stream_c2_monitor.csv", newline="") as handle:
        samples = list(csv.DictReader(handle))
    assert any(row["server_running"] and float(row["server_running"]) >= 1 for row in samples), samples[:3]
    assert all(row["server_waiting"] != "" for row in samples if row["server_running"])
    assert any(row["server_kv_cache_pct"] and float(row["server_kv_cache_pct"]) > 0 for row in samples)
