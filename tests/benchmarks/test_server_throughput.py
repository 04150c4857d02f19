"""The server benchmark's client, table and CLI against real mock servers, and one real batched server run."""

from __future__ import annotations

import json

import pytest

from benchmarks.server_throughput import (
    LevelResult,
    Workload,
    comparison_rows,
    main,
    render_table,
    run_level,
)
from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results
from llmload.core.records import PromptRecord

PROMPTS = tuple(PromptRecord(id=f"p{i}", task="chat", source="test", prompt=text,
                             messages=({"role": "user", "content": text},), max_tokens=0, input_tokens=0)
                for i, text in enumerate(("Hello there", "Tell me a story")))


@pytest.fixture
def mock_url(server_factory) -> str:
    return server_factory("mock", "--mock-ttft-ms", "50", "--mock-itl-ms", "5", "--log-level", "warning")


@pytest.mark.integration
@pytest.mark.serial
def test_closed_loop_records_every_request_once_with_its_timings(mock_url):
    workload = Workload(PROMPTS, output_tokens=6, model="mock")
    results = run_level(mock_url, workload, concurrency=3, requests=7, timeout=30)
    assert len(results) == 7 and len({r.request_id for r in results}) == 7
    assert all(r.success for r in results), [r.error for r in results]
    assert {r.output_tokens for r in results} == {6} and {r.output_tokens_source for r in results} == {"usage"}
    assert all(len(r.token_offsets) == 6 and r.token_offsets[0] >= 0.04 for r in results)
    assert {r.worker for r in results} == {"user-0", "user-1", "user-2"}  # the three users all sent
    assert {r.prompt_id for r in results} == {"p0", "p1"}
    summary = summarize(results)
    assert summary.total_output_tokens == 42 and summary.failures == 0
    assert 0.04 <= summary.get("ttft", "p50") < 0.5
    # 3 users in parallel: 7 requests of about 80 ms in well under 7 x 80 ms
    assert summary.duration_s < 7 * 0.08


@pytest.mark.integration
@pytest.mark.parametrize("api", ["responses", "completion"])
def test_every_api_is_benchmarked_alike(mock_url, api):
    results = run_level(mock_url, Workload(PROMPTS, output_tokens=6, model="mock", api=api), 2, 4, timeout=30)
    assert all(r.success and r.api == api for r in results), [r.error for r in results]
    assert {r.output_tokens for r in results} == {6} and all(len(r.token_offsets) == 6 for r in results)
    assert 0.04 <= summarize(results).get("ttft", "p50") < 0.5


@pytest.mark.integration
def test_a_refused_request_comes_back_as_a_failed_result(mock_url):
    (result,) = run_level(mock_url, Workload(PROMPTS, output_tokens=6, model="no-such-model"), 1, 1, timeout=30)
    assert not result.success and result.status_code == 404 and "does not exist" in result.error
    (gone,) = run_level("http://127.0.0.1:9", Workload(PROMPTS, 6, "mock"), 1, 1, timeout=5)
    assert not gone.success and "connection refused" in gone.error


@pytest.mark.integration
def test_table_ratios_are_baseline_over_server(mock_url):
    workload = Workload(PROMPTS, output_tokens=4, model="mock")
    summary = summarize(run_level(mock_url, workload, concurrency=2, requests=2, timeout=30))
    half = summarize(run_level(mock_url, Workload(PROMPTS, output_tokens=2, model="mock"), 2, 2, timeout=30))
    levels = [LevelResult("vllm", 8, summary), LevelResult("basic-batched", 8, half, peak_rss_mib=321.0),
              LevelResult("basic-naive", 8, error="did not start: boom")]
    rows = comparison_rows(levels, "vllm", ["basic-naive", "basic-batched", "vllm"])
    assert [r["server"] for r in rows] == ["basic-naive", "basic-batched", "vllm"]
    batched, vllm = rows[1], rows[2]
    assert batched["throughput_ratio"] == pytest.approx(summary.output_token_throughput
                                                        / half.output_token_throughput)
    assert batched["ttft_ratio"] == pytest.approx(summary.get("ttft", "p50") / half.get("ttft", "p50"))
    assert vllm["throughput_ratio"] == pytest.approx(1.0) and rows[0]["output_tokens_per_s"] is None
    table = render_table(rows, "vllm")
    assert "boom" in table and table.count("vllm / server") == 2 and " 321" in table.splitlines()[3]
    # a run without the baseline (the long-run memory check) has no ratios
    alone = comparison_rows([LevelResult("basic-batched", 32, summary)] * 2, None)
    assert [r["throughput_ratio"] for r in alone] == [None, None]


@pytest.mark.parametrize("argv, message", [
    (["--servers", "naive,tgi"], "argument --servers: unknown server 'tgi'"),
    (["--servers", "mock", "--baseline", "vllm"], "--baseline vllm is not among --servers (mock)"),
    (["--concurrency", "1,x"], "argument --concurrency: 'x' is not an integer >= 1"),
    (["--output-tokens", "0"], "argument --output-tokens: '0' is not an integer >= 1"),
    (["--threads", "-1"], "argument --threads: '-1' is not an integer >= 0"),
])
@pytest.mark.unit
def test_cli_rejects_bad_settings_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"error: {message}"] or err.startswith(f"error: {message}"), err
    assert len(err.splitlines()) == 1


@pytest.mark.unit
def test_cli_reports_an_unreadable_prompt_file(tmp_path, capsys):
    assert main(["--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read prompts" in capsys.readouterr().err


@pytest.mark.integration
def test_two_mock_servers_from_the_registry_end_to_end(tmp_path, capsys):
    """Servers come from the target registry by name; the baseline is an option, not a literal."""
    out = tmp_path / "bench"
    code = main(["--servers", "mock,twin=mock", "--baseline", "twin", "--concurrency", "1,2",
                 "--requests-per-user", "2", "--output-tokens", "3", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    data = json.loads((out / "summary.json").read_text())
    assert data["settings"]["baseline"] == "twin"
    rows = data["rows"]
    assert [(r["server"], r["concurrency"], r["requests"], r["failures"]) for r in rows] == [
        ("mock", 1, 2, 0), ("twin", 1, 2, 0), ("mock", 2, 4, 0), ("twin", 2, 4, 0)]
    assert all(r["ttft_ratio"] is not None and r["throughput_ratio"] is not None for r in rows)
    assert [r["throughput_ratio"] for r in rows if r["server"] == "twin"] == [1.0, 1.0]
    raw = [r for f in sorted(out.glob("*-c*.jsonl")) for r in read_results(f)]
    assert len(raw) == 12 and all(r.success and len(r.token_offsets) == 3 for r in raw)
    assert "twin / server" in printed.out


@pytest.mark.integration
@pytest.mark.model
@pytest.mark.slow
def test_batched_server_end_to_end_with_its_memory(tmp_path, capsys, default_model):
    out = tmp_path / "bench"
    code = main(["--servers", "batched", "--concurrency", "1,3", "--requests-per-user", "1", "--output-tokens", "4",
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["server"], r["concurrency"], r["requests"], r["failures"]) for r in rows] == [
        ("basic-batched", 1, 1, 0), ("basic-batched", 3, 3, 0)]
    for row in rows:
        assert row["output_tokens_per_s"] > 0 and row["ttft_p50_s"] > 0
        assert 100 < row["peak_rss_mib"] < 8192  # the 135M model in float32 with torch: hundreds of MiB
        assert row["throughput_ratio"] is None  # no vLLM in this run
    assert (out / "basic-batched-c3.jsonl").is_file() and (out / "basic-batched-c3_monitor.csv").is_file()
    assert "basic-batched" in printed.out and "RSS MiB" in printed.out


@pytest.mark.unit
def test_every_request_is_unique_and_asks_for_a_fixed_length():
    workload = Workload(PROMPTS, output_tokens=5, model="m")
    records = [workload.record(i) for i in range(4)]
    assert [r.messages[-1]["content"] for r in records] == [
        "[0] Hello there", "[1] Tell me a story", "[2] Hello there", "[3] Tell me a story"]
    params = workload.params
    assert (params.max_tokens, params.ignore_eos, params.stream, params.temperature) == (5, True, True, 0.0)
    assert PROMPTS[0].messages[-1]["content"] == "Hello there"  # the records themselves are untouched
