"""The server benchmark's client, table and CLI against a real mock server, and one real batched server run."""

from __future__ import annotations

import json

import pytest

from benchmarks.server_throughput import (
    Cell,
    Workload,
    comparison_rows,
    goal_verdicts,
    main,
    render_table,
    run_level,
    send_streamed,
)
from llmload.core.metrics import summarize
from llmload.core.records import PromptRecord

PROMPTS = tuple(PromptRecord(id=f"p{i}", task="chat", source="test", prompt=text,
                             messages=({"role": "user", "content": text},), max_tokens=0, input_tokens=0)
                for i, text in enumerate(("Hello there", "Tell me a story")))


@pytest.fixture
def mock_url(server_factory) -> str:
    return server_factory("mock", "--mock-ttft-ms", "50", "--mock-itl-ms", "5", "--log-level", "warning")


def test_closed_loop_records_every_request_once_with_its_timings(mock_url):
    workload = Workload(PROMPTS, output_tokens=6, model="mock")
    results = run_level(mock_url, workload, concurrency=3, requests=7, timeout=30)
    assert len(results) == 7 and len({r.request_id for r in results}) == 7
    assert all(r.success for r in results), [r.error for r in results]
    assert {r.output_tokens for r in results} == {6} and {r.output_tokens_source for r in results} == {"usage"}
    assert all(len(r.token_offsets) == 6 and r.token_offsets[0] >= 0.04 for r in results)
    assert {r.worker for r in results} <= {"user-0", "user-1", "user-2"}
    assert {r.prompt_id for r in results} == {"p0", "p1"}
    summary = summarize(results)
    assert summary.total_output_tokens == 42 and summary.failures == 0
    assert 0.04 <= summary.get("ttft", "p50") < 2.0


def test_a_refused_request_comes_back_as_a_failed_result(mock_url):
    body = Workload(PROMPTS, output_tokens=6, model="no-such-model").body(0)
    result = send_streamed(mock_url, body, "r1", timeout=30)
    assert not result.success and result.status_code == 404 and "does not exist" in result.error
    gone = send_streamed("http://127.0.0.1:9", body, "r2", timeout=5)
    assert not gone.success and gone.error


def test_table_ratios_and_goal_verdicts_come_from_the_summaries(mock_url):
    workload = Workload(PROMPTS, output_tokens=4, model="mock")
    summary = summarize(run_level(mock_url, workload, concurrency=2, requests=2, timeout=30))
    cells = [Cell("vllm", 8, summary), Cell("batched", 8, summary, peak_rss_mib=321.0),
             Cell("naive", 8, error="did not start: boom")]
    rows = comparison_rows(cells)
    assert [r["server"] for r in rows] == ["naive", "batched", "vllm"]
    batched = rows[1]
    assert batched["throughput_vs_vllm"] == pytest.approx(1.0) and batched["ttft_vs_vllm"] == pytest.approx(1.0)
    assert rows[0]["output_tokens_per_s"] is None and "boom" in render_table(rows)
    assert batched["peak_rss_mib"] == 321.0 and " 321" in render_table(rows).splitlines()[3]
    assert goal_verdicts(rows) == ["8 users: batched at 1.00x vLLM's tokens/s (goal >= 0.5), "
                                   "TTFT 1.00x (goal <= 2.0): met"]
    # a run without vLLM (the long-run memory check) says once that the goal was not checked
    alone = comparison_rows([Cell("batched", 32, summary), Cell("batched", 32, summary)])
    assert [r["throughput_vs_vllm"] for r in alone] == [None, None]
    assert goal_verdicts(alone) == ["goal not checked: it compares batched with vllm, and --servers ran batched"]


@pytest.mark.parametrize("argv, message", [
    (["--servers", "naive,tgi"], "--servers must be a comma list of naive"),
    (["--concurrency", "1,x"], "comma-separated integers"),
    (["--output-tokens", "0"], "positive integer"),
    (["--threads", "-1"], "--threads must be 0 or more"),
])
def test_cli_rejects_bad_settings_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_reports_an_unreadable_prompt_file(tmp_path, capsys):
    assert main(["--prompts", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read prompts" in capsys.readouterr().err


@pytest.mark.model
def test_batched_server_end_to_end_with_its_memory(tmp_path, capsys, default_model):
    out = tmp_path / "bench"
    code = main(["--servers", "batched", "--concurrency", "1,3", "--requests-per-user", "1", "--output-tokens", "4",
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [(r["server"], r["concurrency"], r["requests"], r["failures"]) for r in rows] == [
        ("batched", 1, 1, 0), ("batched", 3, 3, 0)]
    for row in rows:
        assert row["output_tokens_per_s"] > 0 and row["ttft_p50_s"] > 0
        assert 100 < row["peak_rss_mib"] < 8192  # the 135M model in float32 with torch: hundreds of MiB
        assert row["throughput_vs_vllm"] is None  # no vLLM in this run
    assert (out / "batched-c3.jsonl").is_file() and (out / "batched-c3_monitor.csv").is_file()
    assert "batched" in printed.out and "RSS MiB" in printed.out


def test_every_request_is_unique_and_asks_for_a_fixed_length():
    workload = Workload(PROMPTS, output_tokens=5, model="m")
    bodies = [workload.body(i) for i in range(4)]
    assert [b["messages"][-1]["content"] for b in bodies] == [
        "[0] Hello there", "[1] Tell me a story", "[2] Hello there", "[3] Tell me a story"]
    assert all((b["max_tokens"], b["ignore_eos"], b["stream"], b["temperature"]) == (5, True, True, 0.0)
               for b in bodies)
    assert PROMPTS[0].messages[-1]["content"] == "Hello there"  # the records themselves are untouched
