"""The runner end to end: real servers, real Locust, real monitor, real merge, on tiny matrices."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmload.core.rawlog import read_results
from llmload.core.records import PromptRecord, write_records
from llmload.core.services import ServiceProcess, free_port
from llmload.targets.basic import basic_server_command

REPO = Path(__file__).resolve().parents[3]


def make_data(folder: Path, tasks=("qa",), n=8) -> Path:
    for task in tasks:
        write_records(folder / f"{task}.jsonl", [
            PromptRecord(id=f"{task}-{i}", task=task, source="test", prompt=f"Answer briefly: what is {i} + {i}?",
                         messages=[{"role": "user", "content": f"Answer briefly: what is {i} + {i}?"}],
                         max_tokens=16, input_tokens=12) for i in range(n)])
    return folder


def run_runner(*args: str, timeout: float = 600, merged: bool = False) -> subprocess.CompletedProcess:
    """Run the runner; ``merged``: stderr into stdout, as a terminal shows them (``proc.stderr`` is then "")."""
    proc = subprocess.run([sys.executable, "-m", "llmload.runner", *args], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True, timeout=timeout)
    proc.stderr = proc.stderr or ""
    return proc


def read_summary(run_dir: Path) -> list[dict]:
    with (run_dir / "report" / "summary.csv").open() as handle:
        return list(csv.DictReader(handle))


def test_mock_matrix_end_to_end(tmp_path):
    data = make_data(tmp_path / "data", ("qa", "chat"))
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "mock", "--tasks", "qa,chat", "--modes", "sync,stream", "--parallel", "1,3",
                      "--requests", "5", "--max-tokens", "6", "--data-dir", str(data), "--out", str(run_dir),
                      "--mock-ttft-ms", "40", "--mock-itl-ms", "10", merged=True)
    assert proc.returncode == 0, proc.stdout
    # one whole line per cell, even where the monitor prints its no-GPU notice
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 8 and progress[-1].startswith("[8/8] mock chat stream c=3 ... 5 req, 0 failed"), progress
    assert all(re.match(r"\[\d/8\] mock \w+ \w+ c=\d \.\.\. 5 req, 0 failed", line) for line in progress), progress
    info = json.loads((run_dir / "run.json").read_text())
    assert info["settings"]["requests"] == 5 and info["versions"]["locust"]
    cells = [json.loads(line) for line in (run_dir / "cells.jsonl").read_text().splitlines()]
    assert len(cells) == 8 and all(c["status"] == "ok" for c in cells)
    rows = read_summary(run_dir)
    assert len(rows) == 8
    for row, cell in zip(rows, cells):
        raw = read_results(run_dir / f"{cell['prefix']}_requests.jsonl")
        assert len(raw) == int(row["requests"]) == int(row["locust_requests"])
        assert all(r.output_tokens == 6 for r in raw)  # fixed output length
        assert float(row["peak_server_rss_mib"]) > 10  # the monitor sampled the server tree
        e2e = float(row["e2e_p50"])
        assert 0.09 <= e2e < 0.25  # 40 ms + 5 x 10 ms on the mock's schedule
        if row["mode"] == "stream":
            assert 0.04 <= float(row["ttft_p50"]) < 0.12
        else:
            assert row["ttft_p50"] == ""
    report = run_dir / "report"
    for name in ("summary.md", "ratios.csv", "latency_qa.png", "latency_chat.png", "token_throughput.png",
                 "memory.png"):
        assert (report / name).stat().st_size > 0, name


def test_server_that_fails_to_start_is_recorded_and_reported(tmp_path):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    dead = f"http://127.0.0.1:{free_port()}"
    proc = run_runner("--servers", f"mock,gone={dead}", "--tasks", "qa", "--modes", "stream", "--parallel", "1",
                      "--requests", "2", "--max-tokens", "3", "--data-dir", str(data), "--out", str(run_dir),
                      "--mock-ttft-ms", "5", "--mock-itl-ms", "1")
    assert proc.returncode == 0, proc.stderr
    assert "gone failed to start" in proc.stdout
    rows = {r["server"]: r for r in read_summary(run_dir)}
    assert rows["mock"]["status"] == "ok"
    assert rows["gone"]["status"] == "skipped" and "does not answer" in rows["gone"]["error"]
    assert "Missing or failed cells" in (run_dir / "report" / "summary.md").read_text()


def test_server_dying_mid_run_marks_the_rest_and_stop_on_error(tmp_path):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    port = free_port()
    server = ServiceProcess("mock", basic_server_command("mock", port, extra=["--mock-ttft-ms", "5",
                                                                            "--mock-itl-ms", "1"]),
                            f"http://127.0.0.1:{port}/health", tmp_path / "mock.log").start()
    server.wait_ready(60)
    first = run_dir / "ext" / "qa_stream_c1_requests.jsonl"

    def kill_after_first_cell():
        deadline = time.monotonic() + 120
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        server.stop(grace=0)

    killer = threading.Thread(target=kill_after_first_cell)
    killer.start()
    try:
        proc = run_runner("--servers", f"ext=http://127.0.0.1:{port}", "--tasks", "qa", "--modes", "stream",
                          "--parallel", "1,2,4", "--requests", "30", "--max-tokens", "20", "--data-dir", str(data),
                          "--out", str(run_dir), "--on-error", "stop")
    finally:
        killer.join()
        server.stop()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = read_summary(run_dir)
    assert rows[0]["status"] == "ok"
    assert any(r["status"] == "failed" for r in rows[1:]), rows
    assert len(rows) < 3 or rows[-1]["status"] != "ok"


def test_bad_arguments_are_one_clear_line(tmp_path):
    proc = run_runner("--tasks", "poetry", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: unknown tasks poetry (choose from chat, summarization, qa, code)"]
    proc = run_runner("--parallel", "1,x")
    assert proc.returncode == 2 and "--parallel must be" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_runner("--servers", "basic-naive", "--model", "./models/not-there", "--out", str(tmp_path / "y"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: model: no model folder at ./models/not-there: pass a model folder or a Hugging Face id, or leave "
        "--model out to use the embedded default (materialised by `make model`)"]


@pytest.mark.model
def test_basic_server_on_the_real_model(tmp_path, default_model):
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "basic", "--tasks", "qa", "--modes", "stream", "--parallel", "2",
                      "--requests", "2", "--max-tokens", "8", "--data-dir", str(data), "--out", str(run_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_summary(run_dir)
    assert row["status"] == "ok" and int(row["failures"]) == 0
    assert float(row["output_token_throughput"]) > 0
    assert float(row["peak_server_rss_mib"]) > 200  # the model's weights are in the server's memory
    raw = read_results(run_dir / "basic-naive" / "qa_stream_c2_requests.jsonl")
    assert [r.output_tokens for r in raw] == [8, 8]


@pytest.mark.vllm
def test_one_real_vllm_cell(tmp_path, default_model):
    """The vLLM deployment on a fresh machine: launcher, one Locust run, the monitor, the merge."""
    from server.vllm_launcher import vllm_installed

    if not vllm_installed():
        pytest.skip("vLLM is not installed (LLMLOAD_VLLM=none)")
    data = make_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    proc = run_runner("--servers", "vllm", "--tasks", "qa", "--modes", "stream", "--parallel", "2",
                      "--requests", "4", "--max-tokens", "16", "--data-dir", str(data), "--out", str(run_dir),
                      "--vllm-timeout", "900", timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_summary(run_dir)
    assert row["status"] == "ok", row
    assert int(row["requests"]) == 4 and int(row["failures"]) == 0
    assert float(row["ttft_p50"]) > 0
    assert float(row["peak_server_rss_mib"]) > 200  # engine subprocess included
    raw = read_results(run_dir / "vllm" / "qa_stream_c2_requests.jsonl")
    assert all(r.output_tokens == 16 and r.output_tokens_source == "usage" for r in raw)
    # the cells repeat their prompts and the basic server has no prefix cache: vLLM runs without one too
    assert "enable_prefix_caching=False" in (run_dir / "vllm" / "server.log").read_text()
