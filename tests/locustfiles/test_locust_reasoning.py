"""Reasoning models, the Responses API and multi-token chunks, measured by real Locust runs against the mock.

The issue's measurement: a server that sends 20 reasoning tokens from 100 ms, one
every 20 ms, then the answer. TTFT must come out at 100 ms (it counts the first
token of any kind, as vLLM's benchmark, GuideLLM and AIPerf do), TTFO (the first
answer token) at 100 + 20 x 20 = 500 ms, TPOT at 20 ms, and the 20 reasoning
tokens must be in the raw log, the summary line and the web UI's table. Then the
same through the Responses API and sync requests, and a server that sends four
tokens per chunk (one every 10 ms, so a chunk every 40 ms): with running counts
(chat's ``continuous_usage_stats``) or the model's tokenizer (``--tokenizer``)
ITL and TPOT are per token (10 ms); without either, ITL is per chunk and flagged.
Last, bad input: ``--api responses`` against a server without the endpoint.

The bounds allow for this shared 2-core machine: the loopback and the client's
scheduling add a few milliseconds to TTFT (never subtract: a server cannot send
early); TPOT is a difference of two such times over 9 or more gaps.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from locust_helpers import locust_command, output, read_failures, run_locust, serving, write_prompts
from llmload.core.metrics import request_metrics, summarize
from llmload.core.model_store import default_model_dir
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.services import free_port
from llmload.targets.basic import basic_server_command
from server.engines.mock import MOCK_REASONING_WORDS, MOCK_WORDS

pytestmark = pytest.mark.integration

FAULT_SERVER = Path(__file__).resolve().parents[1] / "llmload" / "core" / "fault_server.py"
REASONING, ANSWER, TTFT_MS, ITL_MS = 20, 10, 100.0, 20.0
TTFO_MS = TTFT_MS + REASONING * ITL_MS
#: The client may see a token this much after the mock sent it (median over the run), never before.
LATE_MS = 25.0


@contextlib.contextmanager
def mock(tmp_path: Path, *flags: str) -> Iterator[str]:
    """A mock server of this test's own, stopped after the block: TTFT 100 ms, ITL 20 ms unless ``flags`` say;
    yields its URL."""
    port = free_port()
    cmd = basic_server_command("mock", port, extra=["--mock-ttft-ms", str(TTFT_MS), "--mock-itl-ms", str(ITL_MS),
                                                    "--log-level", "warning", *flags])
    with serving("mock server", cmd, port, tmp_path / f"server-{port}.log"):
        yield f"http://127.0.0.1:{port}"


def words(pool: tuple[str, ...], count: int) -> str:
    return "".join(" " + pool[i % len(pool)] for i in range(count))


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def web_ui_rows(web: str, requests: int, deadline_s: float = 60.0) -> list[dict]:
    """The web UI's "LLM metrics" rows once the run has stopped with ``requests`` requests (bounded wait)."""
    deadline, rows = time.monotonic() + deadline_s, []
    while time.monotonic() < deadline:
        try:
            stats = get_json(f"{web}/stats/requests")
        except OSError:
            time.sleep(0.3)
            continue
        rows = {t["key"]: t["data"] for t in stats.get("extended_stats", [])}.get("llm-metrics", [])
        if rows and rows[0]["requests"] == requests and stats["state"] == "stopped":
            return rows
        time.sleep(0.3)
    return rows


@pytest.mark.slow
def test_a_reasoning_model_is_measured_from_its_first_reasoning_token(tmp_path):
    """The issue's server (20 reasoning tokens from 100 ms, one every 20 ms, under ``reasoning_content``), chat
    stream, through the web UI with a raw log."""
    requests = 6
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "reasoning"
    port = free_port()
    with mock(tmp_path, "--mock-reasoning-tokens", str(REASONING), "--mock-reasoning-field", "reasoning_content") \
            as url:
        cmd = locust_command("chat.py", url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                             "--autoquit", "2", "-u", "1", "-r", "1", "--requests", str(requests), "--max-tokens",
                             str(REASONING + ANSWER), "--ignore-eos", "--dataset", str(prompts), "--csv", str(prefix))
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            rows = web_ui_rows(f"http://127.0.0.1:{port}", requests)
            log, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]

    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == requests and all(r.success for r in results), [r.error for r in results][:3]
    for r in results:
        assert (r.output_tokens, r.reasoning_tokens, r.output_tokens_source) == (REASONING + ANSWER, REASONING, "usage")
        assert r.reasoning_text == words(MOCK_REASONING_WORDS, REASONING) and r.output_text == words(MOCK_WORDS, ANSWER)
        assert (r.chunk_tokens, r.chunk_tokens_source) == ([1] * (REASONING + ANSWER), "usage")
        assert r.first_output_offset == r.token_offsets[REASONING]
    s = summarize(results)
    ttft, ttfo, tpot = (s.get("ttft", "p50") * 1000, s.get("ttfo", "p50") * 1000, s.get("tpot", "mean") * 1000)
    print(f"\nMEASURED reasoning chat stream: TTFT p50 {ttft:.1f} ms (true {TTFT_MS:g}), TTFO p50 {ttfo:.1f} ms "
          f"(true {TTFO_MS:g}), TPOT mean {tpot:.2f} ms (true {ITL_MS:g})")
    assert TTFT_MS <= ttft <= TTFT_MS + LATE_MS and TTFO_MS <= ttfo <= TTFO_MS + LATE_MS
    assert abs(tpot - ITL_MS) <= 2.0
    assert s.get("reasoning_tokens", "mean") == REASONING

    # the web UI's table (the catalogue's headline columns) and the summary line say the same
    assert rows, "the web UI never showed the finished run"
    row = rows[0]
    assert TTFT_MS <= float(row["ttftp50"]) <= TTFT_MS + LATE_MS + 5  # a sketch's quantile: within 1 %
    assert TTFO_MS <= float(row["ttfop50"]) <= TTFO_MS + LATE_MS + 10
    assert float(row["reasoningtokensmean"]) == REASONING
    assert "TTFO p50" in log and f"{REASONING:.1f} reasoning tokens per request" in log


@pytest.mark.parametrize("api, mode", [("chat", "sync"), ("responses", "stream"), ("responses", "sync")])
def test_reasoning_through_each_api_and_mode(tmp_path, api, mode):
    requests = 3
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "run_requests.jsonl"
    with mock(tmp_path, "--mock-reasoning-tokens", str(REASONING)) as url:
        proc = run_locust("chat.py", url, "-u", "1", "-r", "1", "--requests", str(requests), "--api", api,
                          "--mode", mode, "--max-tokens", str(REASONING + ANSWER), "--ignore-eos",
                          "--dataset", str(prompts), "--raw-log", str(raw))
    log = output(proc)
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    results = read_results(raw)
    assert len(results) == requests and all(r.success for r in results), [r.error for r in results][:3]
    assert all((r.api, r.reasoning_tokens, r.output_tokens) == (api, REASONING, REASONING + ANSWER) for r in results)
    assert all(r.reasoning_text == words(MOCK_REASONING_WORDS, REASONING) for r in results)
    assert all(r.output_text == words(MOCK_WORDS, ANSWER) for r in results)
    s = summarize(results)
    if mode == "sync":
        assert s.get("ttft", "p50") is None and s.get("ttfo", "p50") is None
        e2e = s.get("e2e", "p50") * 1000
        assert TTFT_MS + (REASONING + ANSWER - 1) * ITL_MS <= e2e <= TTFT_MS + (REASONING + ANSWER - 1) * ITL_MS + 50
    else:
        ttft, ttfo, tpot = (s.get("ttft", "p50") * 1000, s.get("ttfo", "p50") * 1000, s.get("tpot", "mean") * 1000)
        print(f"\nMEASURED reasoning {api} {mode}: TTFT p50 {ttft:.1f} ms, TTFO p50 {ttfo:.1f} ms, "
              f"TPOT mean {tpot:.2f} ms")
        assert TTFT_MS <= ttft <= TTFT_MS + LATE_MS and TTFO_MS <= ttfo <= TTFO_MS + LATE_MS
        assert abs(tpot - ITL_MS) <= 2.0
        # the Responses API has no running counts: one token per chunk here, so ITL is still per token
        assert all(r.chunk_tokens_source == "chunks" and r.flags == [] for r in results)
    assert s.get("reasoning_tokens", "mean") == REASONING


@pytest.mark.parametrize("api, tokenizer, source", [("chat", False, "usage"), ("responses", True, "tokenizer"),
                                                    ("responses", False, "chunks")])
def test_chunks_of_four_tokens(tmp_path, api, tokenizer, source):
    """Four tokens per chunk, one every 10 ms: per-token ITL and TPOT (10 ms) from the running counts or the
    tokenizer; per-chunk ITL (40 ms), flagged, without either. TPOT is per token in all three (usage's total)."""
    per_chunk, itl, tokens = 4, 10.0, 24
    prompts = write_prompts(tmp_path / "chat.jsonl")
    raw = tmp_path / "run_requests.jsonl"
    extra = ["--tokenizer", str(default_model_dir())] if tokenizer else []
    with mock(tmp_path, "--mock-itl-ms", str(itl), "--mock-tokens-per-chunk", str(per_chunk)) as url:
        proc = run_locust("chat.py", url, "-u", "1", "-r", "1", "--requests", "3", "--api", api,
                          "--max-tokens", str(tokens), "--ignore-eos", "--dataset", str(prompts), "--raw-log",
                          str(raw), *extra)
    log = output(proc)
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    results = read_results(raw)
    assert len(results) == 3 and all(r.success for r in results), [r.error for r in results][:3]
    assert all(r.chunk_tokens_source == source and len(r.token_offsets) == tokens // per_chunk for r in results)
    gaps = [g * 1000 for r in results for g in request_metrics(r).itl]
    tpot = summarize(results).get("tpot", "mean") * 1000
    print(f"\nMEASURED {per_chunk} tokens per chunk, {api}, counts from {source}: ITL mean "
          f"{sum(gaps) / len(gaps):.2f} ms over {len(gaps)} gaps, TPOT mean {tpot:.2f} ms (true {itl:g})")
    if source == "chunks":
        assert all(r.flags == ["itl_per_chunk"] and r.chunk_tokens == [] for r in results)
        assert len(gaps) == 3 * (tokens // per_chunk - 1)
        assert abs(sum(gaps) / len(gaps) - per_chunk * itl) <= 4.0
        assert abs(tpot - itl * (tokens - per_chunk) / (tokens - 1)) <= 2.0  # vLLM's formula: over tokens - 1
    else:
        assert all(r.chunk_tokens == [per_chunk] * (tokens // per_chunk) and r.flags == [] for r in results)
        assert len(gaps) == 3 * (tokens - per_chunk)
        assert abs(sum(gaps) / len(gaps) - itl) <= 1.0 and abs(tpot - itl) <= 1.0


def test_responses_against_a_server_without_the_endpoint(tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "missing"
    port = free_port()
    with serving("fault server", [sys.executable, str(FAULT_SERVER), "--port", str(port), "--no-responses"], port,
                 tmp_path / "server.log"):
        proc = run_locust("chat.py", f"http://127.0.0.1:{port}", "-u", "1", "-r", "1", "--requests", "3",
                          "--api", "responses", "--model", "ok", "--dataset", str(prompts), "--csv", str(prefix))
    log = output(proc)
    assert proc.returncode != 0 and "Traceback" not in log, log[-3000:]
    message = "HTTP 404: the server has no /v1/responses (Not Found)"
    assert read_failures(prefix) == {message: 3}
    assert sum(message in line for line in log.splitlines()) >= 1
    assert all(r.error == message for r in read_results(f"{prefix}_requests.jsonl"))


def test_a_tokenizer_that_cannot_load_is_one_line(tmp_path):
    proc = run_locust("chat.py", "http://127.0.0.1:9", "--requests", "1", "--tokenizer", str(tmp_path / "none"))
    log = output(proc)
    assert proc.returncode == 2 and "Traceback" not in log, log[-2000:]
    assert log.strip().splitlines()[-1].startswith("error: --tokenizer: cannot load the tokenizer of")
