"""The load-generator benchmark, end to end on small settings: real mock server, real Locust, real vllm bench."""

from __future__ import annotations

import json

import pytest

from benchmarks.loadgen_capacity import (
    Measurement,
    Workload,
    accuracy_verdicts,
    capacity_ratios,
    estimate_intended_starts,
    main,
    rate_verdicts,
    sustained_over,
    vllm_bench_available,
    vllm_bench_results,
)
from llmload.core.metrics import RequestResult, request_metrics
from llmload.core.paths import REPO_ROOT

#: A fast schedule for the accuracy part: 20 ms to the first token, 2 ms between tokens, 8 tokens.
FAST_ACCURACY = ["--users", "1,4", "--requests-per-user", "2", "--tokens", "8", "--ttft-ms", "20", "--itl-ms", "2"]


@pytest.mark.integration
@pytest.mark.serial
@pytest.mark.slow
def test_locust_capacity_and_accuracy_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["--tools", "locust", "--parts", "capacity,accuracy", "--capacity-users", "2",
                 "--capacity-requests", "40", "--long-tokens", "16", *FAST_ACCURACY, "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["workload"]["part"], r["workload"]["users"], r["workload"]["answer_tokens"]) for r in rows] == [
        ("capacity", 2, 16), ("capacity", 2, 1), ("accuracy", 1, 8), ("accuracy", 4, 8)]
    for row in rows:
        load = row["workload"]
        assert row["tool"] == "locust" and row["error"] == "" and row["failures"] == 0
        assert row["requests"] == load["requests"] and row["paired"] == load["requests"]  # every request paired
        # on the mock every chunk is one token: the chunk rate is the request rate times the answer length
        assert row["chunks_per_s"] == pytest.approx(row["requests_per_s"] * load["answer_tokens"], rel=1e-6)
        assert row["client_cpu_pct"] is not None and row["server_cpu_pct"] is not None
        assert row["ttft_error_ms"]["p50"] >= 0  # a client cannot see a token before the server sent it
        assert row["stamp_error_ms"]["p99"] >= row["stamp_error_ms"]["p50"] >= 0
        if row["bound_ms"] is not None:  # the bound the run stated (a run of a fraction of a second may have none)
            assert row["bound_samples"] > 0 and row["bound_ms"] >= 0
            assert 0 <= row["covered_pct"]["ttft"] <= 100 and 0 <= row["covered_pct"]["stamps"] <= 100
    assert any(row["bound_ms"] is not None for row in rows), rows
    accuracy = [r for r in rows if r["workload"]["part"] == "accuracy"]
    for row in accuracy:
        assert 20 <= row["ttft_true_p50_ms"] < 500  # the mock's 20 ms schedule, plus the server's own lateness
        assert row["ttft_error_ms"]["p50"] < 50  # loopback plus scheduling, on a shared machine
    assert "capacity (mock TTFT 0, ITL 0" in printed.out and "accuracy (mock TTFT 20 ms" in printed.out
    assert "locust: at most" in printed.out and "locust: TTFT error p50" in printed.out
    assert "Locust's client-error bound (p99 of its loop probe's delays" in printed.out
    # the raw files stay for inspection
    assert (out / "locust-accuracy-u4-t8_requests.jsonl").is_file()
    assert (out / "accuracy_server_record.jsonl").is_file()


@pytest.mark.integration
@pytest.mark.serial
@pytest.mark.slow
def test_locust_rate_part_measures_the_dispatch_lag_at_each_offered_rate(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["--tools", "locust", "--parts", "rate", "--rates", "20,60", "--rate-seconds", "2", "--rate-pool", "32",
                 "--rate-min-requests", "50", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["workload"]["rate"], r["requests"]) for r in rows] == [(20, 50), (60, 120)]
    for row in rows:
        assert abs(row["achieved_rate"] / row["workload"]["rate"] - 1) < 0.05
        assert 0 <= row["lag_ms"]["p50"] <= row["lag_ms"]["p99"] < 50
    assert "rate (open loop, constant spacing" in printed.out and "locust: dispatch lag p99" in printed.out


@pytest.mark.unit
def test_vllm_bench_intended_starts_are_estimated_from_its_constant_schedule():
    results = [RequestResult(str(i), "chat", "chat", "stream", 100.0 + (i + 1) * 0.1 + lag, 0.1)
               for i, lag in enumerate([0.002, 0.0, 0.010, 0.001])]
    estimate_intended_starts(results, 10.0)
    lags = [request_metrics(r).dispatch_lag for r in results]
    assert lags == pytest.approx([0.002, 0.0, 0.010, 0.001], abs=1e-9)


@pytest.mark.skipif(not vllm_bench_available(), reason="vLLM is not installed")
@pytest.mark.e2e
def test_vllm_bench_serve_side_by_side_is_paired_through_its_request_ids(tmp_path, capsys, default_model):
    out = tmp_path / "bench"
    code = main(["--tools", "vllm-bench", "--parts", "accuracy", "--users", "3", "--requests-per-user", "1",
                 "--tokens", "8", "--ttft-ms", "20", "--itl-ms", "2", "--tokenizer", default_model,
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    (row,) = json.loads((out / "summary.json").read_text())["rows"]
    assert row["tool"] == "vllm-bench" and row["requests"] == 50 and row["failures"] == 0
    assert row["paired"] == 50  # X-Request-Id pairs each of its requests with the server's record
    assert 0 <= row["ttft_error_ms"]["p50"] < 50
    assert row["chunks_per_s"] == pytest.approx(row["requests_per_s"] * 8, rel=1e-6)


@pytest.mark.unit
def test_vllm_bench_detailed_results_become_request_results(tmp_path):
    detailed = {"start_times": [100.0, 100.5], "ttfts": [0.2, None], "itls": [[0.01, 0.02], []],
                "latencies": [0.23, 0.0], "output_lens": [3, 0],
                "errors": ["", "Traceback (most recent call last):\n  ...\naiohttp.ClientError: boom\n"]}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(detailed))
    ok, failed = vllm_bench_results(path, "lg", clock_offset=1_000.0)
    assert (ok.prompt_id, ok.start_time, ok.success, ok.output_tokens) == ("lg-0", 1_100.0, True, 3)
    assert ok.token_offsets == pytest.approx([0.2, 0.21, 0.23])
    metrics = request_metrics(ok)
    assert metrics.ttft == pytest.approx(0.2) and metrics.e2e == pytest.approx(0.23)
    assert (failed.prompt_id, failed.success, failed.error) == ("lg-1", False, "aiohttp.ClientError: boom")


def _measured(tool: str, users: int, p50: float) -> Measurement:
    return Measurement(tool, Workload("accuracy", users, 50, 8), requests=50, chunks_per_s=users * 100.0,
                       ttft_error_ms={"p50": p50, "p90": p50 * 2, "max": p50 * 3})


@pytest.mark.unit
def test_accuracy_verdict_names_the_user_count_from_which_the_error_stays_past_the_limit():
    rows = [_measured("locust", 1, 0.5), _measured("locust", 64, 6.0), _measured("locust", 16, 2.0),
            _measured("vllm-bench", 1, 0.4), _measured("vllm-bench", 64, 2.0), _measured("vllm-bench", 16, 2.6)]
    assert accuracy_verdicts(rows, 5.0) == [
        "locust: TTFT error p50 passes 5 ms from 64 users on (6.0 ms at 6,400 chunks/s); "
        "p90 passes 5 ms from 64 users on (12.0 ms at 6,400 chunks/s)",
        "vllm-bench: TTFT error p50 stays under 5 ms up to 64 users (6,400 chunks/s; 2.00 ms); "
        "p90 stays under 5 ms up to 64 users (6,400 chunks/s; 4.00 ms) (once at 16 users, not above it)"]


@pytest.mark.unit
def test_a_level_past_the_limit_alone_is_a_spike_not_the_verdict():
    levels = [(25, 6.6), (50, 3.2), (100, 7.2), (200, 3.0), (400, 2.2), (800, 12.7)]
    assert sustained_over(levels, 5.0) == (800, [25, 100])
    assert sustained_over(levels[:-1], 5.0) == (None, [25, 100])
    assert sustained_over([(1, 9.0), (2, 8.0)], 5.0) == (1, [])
    rows = [Measurement("locust", Workload("rate", 256, 400, 4, rate), requests=400, achieved_rate=rate,
                        lag_ms={"p50": 1.0, "p99": lag, "max": lag}) for rate, lag in levels]
    assert rate_verdicts(rows, 5.0) == [
        "locust: dispatch lag p99 passes 5 ms from 800 req/s on (12.7 ms, achieved 800.0 req/s); 2.20 ms at 400 "
        "req/s (once at 25, 100 req/s, not above it)"]


@pytest.mark.parametrize("argv, message", [
    (["--tools", "locust,wrk"], "'wrk' is not one of locust, vllm-bench"),
    (["--parts", "speed"], "'speed' is not one of capacity, accuracy, rate"),
    (["--users", "0"], "'0' is not an integer >= 1"),
    (["--ttft-ms", "-1"], "'-1' is not a number >= 0"),
    (["--rates", "0"], "'0' is not a number > 0"),
])
@pytest.mark.unit
def test_cli_rejects_bad_settings_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.integration
def test_a_reference_checkout_runs_beside_and_the_tools_compare_as_ratios(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["--tools", "locust", "--parts", "capacity", "--capacity-users", "2", "--capacity-requests", "30",
                 "--long-tokens", "16", "--reference", str(REPO_ROOT), "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["tool"], r["workload"]["answer_tokens"]) for r in rows] == [
        ("locust", 16), ("locust-ref", 16), ("locust", 1), ("locust-ref", 1)]
    assert all(r["error"] == "" and r["requests"] == 30 and r["paired"] == 30 for r in rows)
    assert "locust / locust-ref: " in printed.out and "the chunks per client CPU-second" in printed.out
    assert main(["--tools", "locust", "--reference", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: --reference {tmp_path} is not a checkout of this suite " \
                                              f"(no llmload/loadgen/ in it)"


@pytest.mark.unit
def test_capacity_ratios_pool_chunks_over_client_cpu_seconds():
    def run(tool, users, chunks_per_s, cpu_pct, duration_s=10.0, tokens=256):
        return Measurement(tool, Workload("capacity", users, 100, tokens), requests=100, chunks_per_s=chunks_per_s,
                           duration_s=duration_s, client_cpu_pct=cpu_pct)
    rows = [run("locust", 1, 10_000, 10), run("vllm-bench", 1, 10_000, 20),
            run("locust", 8, 30_000, 30, duration_s=20.0), run("vllm-bench", 8, 30_000, 60, duration_s=20.0),
            run("locust", 8, 900, 50, tokens=1), run("vllm-bench", 8, 900, 10, tokens=1)]  # req/s runs: not counted
    # locust: (100k + 600k chunks) / (1 + 6 CPU-s) = 100k; vllm-bench: 700k / 14 = 50k
    assert capacity_ratios(rows) == ["locust / vllm-bench: 2.00x the chunks per client CPU-second (100,000 against "
                                     "50,000; 1 users 2.00x, 8 users 2.00x)"]
