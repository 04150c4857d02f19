"""Timing invariants of the one metrics module, pinned with scripted timestamps."""

import math
import random

import pytest

from llmload.core.metrics import (SLO, LiveStats, RequestResult, column_scale, column_title, headline_columns,
                                  percentile, ratio, request_metrics, summarize, summary_columns)
from llmload.core.rawlog import read_results, write_results

pytestmark = pytest.mark.unit


def stream_result(start=1000.0, ttft=0.2, itl=0.02, tokens=10, **kw):
    offsets = [ttft + i * itl for i in range(tokens)]
    return RequestResult(request_id=kw.pop("rid", "r"), task="qa", api="chat", mode="stream", start_time=start,
                         end_offset=offsets[-1] + 0.005, token_offsets=offsets, output_tokens=tokens,
                         output_tokens_source="usage", **kw)


def test_stream_metrics_follow_the_definitions():
    m = request_metrics(stream_result())
    assert m.ttft == pytest.approx(0.2)
    assert m.e2e == pytest.approx(0.2 + 9 * 0.02)  # last token, not the trailing [DONE]
    assert m.tpot == pytest.approx(0.02)
    assert m.tokens_per_s == pytest.approx(10 / m.e2e)


def test_e2e_minus_ttft_equals_sum_of_inter_token_gaps():
    offsets = [0.31, 0.35, 0.36, 0.52, 0.53, 0.70]
    r = RequestResult("r", "chat", "completion", "stream", 0.0, 0.75, offsets, output_tokens=6)
    m = request_metrics(r)
    assert math.isclose(m.e2e - m.ttft, sum(m.itl), abs_tol=1e-12)
    assert len(m.itl) == len(offsets) - 1


def test_sync_has_no_ttft_and_uses_full_body_time():
    r = RequestResult("r", "qa", "chat", "sync", 0.0, 1.5, [], output_tokens=30)
    m = request_metrics(r)
    assert m.ttft is None and m.tpot is None and m.itl == ()
    assert m.e2e == 1.5 and m.tokens_per_s == pytest.approx(20.0)


def test_percentile_matches_linear_interpolation():
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([], 50) is None


def test_summary_throughput_over_wall_time_and_failures_excluded():
    ok = [stream_result(start=100.0 + i, rid=str(i)) for i in range(4)]
    bad = RequestResult("x", "qa", "chat", "stream", 100.5, 0.1, [], success=False, status_code=500, error="boom")
    s = summarize(ok + [bad])
    wall = (103.0 + 0.38) - 100.0
    assert s.requests == 5 and s.failures == 1
    assert s.duration_s == pytest.approx(wall)
    assert s.request_throughput == pytest.approx(4 / wall)
    assert s.output_token_throughput == pytest.approx(40 / wall)
    assert s.get("ttft", "p50") == pytest.approx(0.2)
    assert s.flat()["e2e_p99"] == pytest.approx(0.38)


def test_summary_of_nothing_is_zero_not_an_error():
    s = summarize([])
    assert s.requests == 0 and s.request_throughput == 0.0 and s.get("e2e", "p50") is None


def test_raw_log_round_trip(tmp_path):
    results = [stream_result(rid=str(i)) for i in range(3)]
    path = tmp_path / "run_requests.jsonl"
    assert write_results(path, results) == 3
    assert read_results(path) == results
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match="run_requests.jsonl:1"):
        read_results(path)


def test_warmup_requests_count_nowhere_and_slo_figures_count_every_judged_request():
    warm = stream_result(start=99.0, rid="w", warmup=True)
    met = [stream_result(start=100.0 + i, rid=str(i), slo_ok=True) for i in range(3)]
    missed = stream_result(start=104.0, rid="m", slo_ok=False)
    s = summarize([warm, *met, missed])
    assert s.requests == 4 and s.slo_attainment == pytest.approx(75.0)
    assert s.goodput == pytest.approx(3 / s.duration_s) and s.duration_s == pytest.approx(104.38 - 100.0)
    assert summarize(met).slo_attainment == 100.0 and summarize([stream_result()]).slo_attainment is None


def test_slo_is_judged_from_the_intended_start_and_failures_miss_it():
    slo = SLO.parse("ttft=250,e2e=500")
    on_time = stream_result(start=100.0, intended_start=100.0)  # ttft 200 ms, e2e 380 ms
    late = stream_result(start=100.1, intended_start=100.0)  # 100 ms behind schedule: ttft 300 ms from the schedule
    failed = RequestResult("f", "qa", "chat", "stream", 0.0, 0.1, [], success=False, error="x")
    assert slo.met(on_time) is True and slo.met(late) is False and slo.met(failed) is False
    assert SLO().met(on_time) is None and request_metrics(late).dispatch_lag == pytest.approx(0.1)
    sync = RequestResult("s", "qa", "chat", "sync", 0.0, 0.45, [], output_tokens=5)
    assert slo.met(sync) is True  # a sync answer has no TTFT: only its E2E target counts
    assert slo.describe() == "ttft<=250ms, e2e<=500ms" and slo.to_dict() == {"ttft": 250.0, "e2e": 500.0}


def test_live_stats_match_the_exact_summary_within_the_sketch_accuracy():
    rng = random.Random(1)
    results = []
    for i in range(3000):
        ttft = rng.lognormvariate(-1.5, 0.6)
        results.append(stream_result(start=1000.0 + i * 0.01, rid=str(i), ttft=ttft, itl=rng.uniform(0.01, 0.03),
                                     tokens=rng.randint(2, 40)))
    live, exact = LiveStats(), summarize(results)
    for r in results:
        live.add(r)
    approx = live.summary()
    assert approx.requests == exact.requests and approx.total_output_tokens == exact.total_output_tokens
    assert approx.request_throughput == pytest.approx(exact.request_throughput)
    for metric in ("ttft", "tpot", "e2e"):
        assert approx.get(metric, "mean") == pytest.approx(exact.get(metric, "mean"))
        for stat in ("p50", "p90", "p99"):
            assert approx.get(metric, stat) == pytest.approx(exact.get(metric, stat), rel=0.03)
    halves = LiveStats(), LiveStats()
    for i, r in enumerate(results):
        halves[i % 2].add(r)
    halves[0].merge(halves[1])
    assert halves[0].summary().get("ttft", "p99") == pytest.approx(approx.get("ttft", "p99"), rel=0.01)


def test_ratio_is_baseline_over_server_and_missing_values_give_none():
    assert ratio(300.0, 100.0) == 3.0 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_every_catalogue_column_has_a_title_and_the_flat_row_follows_summary_columns():
    row = summarize([stream_result()]).flat()
    assert list(row) == summary_columns()
    assert column_title("ttft_p50") == "TTFT p50 ms" and column_title("request_throughput") == "req/s"
    assert column_scale("ttft_p50") == 1000.0 and column_scale("output_token_throughput") == 1.0
    assert set(headline_columns()) <= set(summary_columns())


def test_chunks_of_several_tokens_give_per_token_gaps_and_tpot():
    # chunks of 1, 3, 2 tokens: 60 ms before the 3-token chunk, 40 ms before the 2-token one
    r = RequestResult("r", "chat", "chat", "stream", 0.0, 0.3, [0.1, 0.16, 0.2], output_tokens=6,
                      chunk_tokens=[1, 3, 2], chunk_tokens_source="usage")
    m = request_metrics(r)
    assert m.itl == pytest.approx((0.02, 0.02, 0.02, 0.02, 0.02))
    assert m.tpot == pytest.approx(0.02) and math.isclose(sum(m.itl), m.e2e - m.ttft)
    # without the counts: one gap per chunk, and TPOT over output tokens - 1 (vLLM's formula)
    unknown = RequestResult("r", "chat", "chat", "stream", 0.0, 0.3, [0.1, 0.16, 0.2], output_tokens=6)
    assert request_metrics(unknown).itl == pytest.approx((0.06, 0.04)) and request_metrics(unknown).tpot == \
        pytest.approx(0.1 / 5)
    # a chunk said to carry no token hands its gap to the next one; the gaps still add up
    odd = RequestResult("r", "chat", "chat", "stream", 0.0, 0.3, [0.1, 0.12, 0.16, 0.2], output_tokens=4,
                        chunk_tokens=[1, 0, 2, 1])
    assert request_metrics(odd).itl == pytest.approx((0.03, 0.03, 0.04))


def test_reasoning_counts_in_ttft_tpot_and_tokens_and_the_answer_has_its_own_ttfo():
    # the measurement: 20 reasoning tokens from 100 ms, one every 20 ms, then 10 of content
    offsets = [0.1 + 0.02 * i for i in range(30)]
    r = RequestResult("r", "chat", "chat", "stream", 10.0, 0.7, offsets, output_tokens=30,
                      first_output_offset=offsets[20], reasoning_tokens=20)
    m = request_metrics(r)
    assert m.ttft == pytest.approx(0.1) and m.ttfo == pytest.approx(0.5) and m.tpot == pytest.approx(0.02)
    s = summarize([r])
    assert s.get("ttfo", "p50") == pytest.approx(0.5) and s.get("reasoning_tokens", "mean") == 20
    assert "TTFO p50 500.0 ms" in s.line() and "20.0 reasoning tokens per request" in s.line()
    assert "ttfo_p50" in headline_columns() and "reasoning_tokens_mean" in headline_columns()
    assert column_title("ttfo_p50") == "TTFO p50 ms" and column_title("reasoning_tokens_mean") == \
        "reasoning tokens mean tok"
    plain = summarize([stream_result()])
    assert plain.get("reasoning_tokens", "mean") is None and "TTFO" not in plain.line()
    zero = summarize([stream_result(reasoning_tokens=0, first_output_offset=0.2)])  # a server that reports 0
    assert zero.get("reasoning_tokens", "mean") == 0 and "reasoning" not in zero.line() and "TTFO" not in zero.line()


# --------------------------------------------------------------------------- where the time goes

#: The basic server's metrics object (ms): frontend 2, queue 30, prefill 150, decode 180.
BASIC_TIMING = {"frontend_time_ms": 2.0, "queue_time_ms": 30.0, "time_to_first_token_ms": 150.0,
                "generation_time_ms": 180.0, "mean_itl_ms": 20.0, "tokens_per_second": 27.0}


def test_stream_latency_splits_into_the_servers_parts_a_residual_and_a_tail():
    # TTFT 200 ms = residual 18 + frontend 2 + queue 30 + prefill 150; E2E 380 = TTFT + decode 180 + tail 0
    m = request_metrics(stream_result(server_timing=BASIC_TIMING))
    assert (m.frontend, m.queue, m.prefill, m.decode) == pytest.approx((0.002, 0.030, 0.150, 0.180))
    assert m.ttft_residual == pytest.approx(0.200 - 0.002 - 0.030 - 0.150)
    assert m.tail == pytest.approx((m.e2e - m.ttft) - 0.180) and m.tail == pytest.approx(0.0, abs=1e-9)
    assert m.ttft == pytest.approx(m.ttft_residual + m.frontend + m.queue + m.prefill)
    assert m.e2e == pytest.approx(m.ttft + m.decode + m.tail)
    assert m.e2e_residual is None  # a stream's residual is its TTFT's


def test_sync_latency_has_its_e2e_residual():
    r = RequestResult("r", "qa", "chat", "sync", 0.0, 0.400, [], output_tokens=10, server_timing=BASIC_TIMING)
    m = request_metrics(r)
    assert m.e2e_residual == pytest.approx(0.400 - 0.002 - 0.030 - 0.150 - 0.180)
    assert m.ttft_residual is None and m.tail is None


def test_vllms_span_gives_the_frontend_and_its_metrics_object_the_rest():
    # vLLM's metrics object has no frontend; its request span's TTFT from arrival does: 190 - 30 - 150 = 10 ms
    timing = {k: v for k, v in BASIC_TIMING.items() if k != "frontend_time_ms"}
    spans = {"time_in_queue_ms": 30.0, "time_in_model_prefill_ms": 150.0, "time_to_first_token_ms": 190.0,
             "time_in_model_decode_ms": 181.0, "e2e_ms": 371.0}
    m = request_metrics(stream_result(server_timing=timing, server_spans=spans))
    assert m.frontend == pytest.approx(0.010) and m.decode == pytest.approx(0.180)  # the metrics object first
    assert m.ttft_residual == pytest.approx(0.200 - 0.010 - 0.030 - 0.150)
    # the metrics object alone: the frontend stays in the residual
    alone = request_metrics(stream_result(server_timing=timing))
    assert alone.frontend is None and alone.ttft_residual == pytest.approx(0.200 - 0.030 - 0.150)
    # the span alone (a server whose responses carry no metrics object)
    only = request_metrics(stream_result(server_spans=spans))
    assert (only.queue, only.prefill, only.decode, only.frontend) == pytest.approx((0.030, 0.150, 0.181, 0.010))


def test_without_timing_or_with_malformed_timing_the_figures_are_client_only():
    for r in (stream_result(), stream_result(server_timing=None, flags=["server_timing_malformed"])):
        m = request_metrics(r)
        assert (m.frontend, m.queue, m.prefill, m.decode, m.ttft_residual, m.tail) == (None,) * 6
        assert m.ttft == pytest.approx(0.2)
    # without the queue (or the prefill) no residual: it would hold an unknown part
    partial = request_metrics(stream_result(server_timing={"time_to_first_token_ms": 150.0}))
    assert partial.prefill == pytest.approx(0.150) and partial.ttft_residual is None


def test_a_negative_residual_is_kept_as_measured_in_every_summary():
    # the server says 230 ms before the first token; the client saw it after 200 ms
    timing = {**BASIC_TIMING, "queue_time_ms": 78.0}
    results = [stream_result(start=1000.0 + i, server_timing=timing, rid=f"r{i}") for i in range(5)]
    assert request_metrics(results[0]).ttft_residual == pytest.approx(-0.030)
    exact = summarize(results)
    assert exact.get("ttft_residual", "mean") == pytest.approx(-0.030)
    live = LiveStats()
    for r in results:
        live.add(r)
    assert live.summary().get("ttft_residual", "mean") == pytest.approx(-0.030)  # a sum: never clipped
    assert live.summary().get("ttft_residual", "p50") == pytest.approx(-0.030, rel=0.01)  # nor the sketch
    assert summarize(results).get("queue", "p50") == pytest.approx(0.078)
