"""Timing invariants of the one metrics module, pinned with scripted timestamps."""

import math

import pytest

from llmload.core.metrics import RequestResult, percentile, request_metrics, summarize
from llmload.core.rawlog import read_results, write_results


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
