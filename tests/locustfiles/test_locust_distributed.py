"""Distributed mode: a master and two local workers against the mock engine.

The master's raw log must hold every request exactly once (sent by the
workers), its totals must equal the sum over workers, and ``--requests`` must
hold over the whole cluster. The workers get no options but the master's
address: Locust forwards the master's custom options (here --dataset, --mode,
--requests ...) to them.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from locust_helpers import locust_command, output, read_stats, run_locust, write_prompts
from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results
from llmload.core.paths import REPO_ROOT
from llmload.core.services import free_port

REQUESTS = 37  # not a multiple of the users: the budget must stop at exactly this many


def run_cluster(url: str, prefix: Path, *args: str) -> None:
    """A headless master with two local workers, to its end; asserts that all three exit cleanly."""
    port = free_port()
    worker_cmd = locust_command("chat.py", url, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port))
    workers = [subprocess.Popen(worker_cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for _ in range(2)]
    try:
        master = run_locust("chat.py", url, "--master", "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                            "--master-bind-port", str(port), "-t", "60s", "--csv", str(prefix), *args, timeout=120)
        worker_logs = [w.communicate(timeout=30)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    log = output(master)
    assert master.returncode == 0, log[-3000:]
    assert all(w.returncode == 0 for w in workers), [text[-2000:] for text in worker_logs]
    assert "Traceback" not in log + "".join(worker_logs)


def test_master_and_two_workers(mock_server, tmp_path):
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "dist"
    run_cluster(url, prefix, "-u", "8", "-r", "8", "--requests", str(REQUESTS), "--mode", "stream", "--max-tokens",
                "10", "--ignore-eos", "--dataset", str(prompts))

    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == REQUESTS
    assert len({r.request_id for r in results}) == REQUESTS  # each request exactly once
    assert all(r.success for r in results), [r.error for r in results if not r.success][:3]
    per_worker = Counter(r.worker for r in results)
    assert len(per_worker) == 2 and all(name and n > 0 for name, n in per_worker.items())
    assert sum(per_worker.values()) == REQUESTS

    stats = read_stats(prefix)
    total = stats[("", "Aggregated")]
    assert int(total["Request Count"]) == int(stats[("POST", "chat /v1/chat/completions")]["Request Count"]) \
        == REQUESTS
    for name in ("chat TTFT", "chat TPOT"):  # METRIC rows from both workers, not in the Aggregated total
        assert int(stats[("METRIC", name)]["Request Count"]) == REQUESTS
    s = summarize(results)
    assert float(total["Average Response Time"]) == pytest.approx(s.get("e2e", "mean") * 1000, abs=0.01)
    assert abs(s.get("ttft", "mean") * 1000 - 200) < 40 and abs(s.get("tpot", "mean") * 1000 - 20) < 3



def test_an_open_loop_with_warmup_keeps_one_schedule_over_both_workers(mock_server, tmp_path):
    """--rate and --warmup are the master's: one constant schedule and one warm-up over the whole cluster."""
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "open"
    rate, n, warmup = 20.0, 60, 5
    run_cluster(url, prefix, "-u", "16", "-r", "16", "--requests", str(n), "--warmup", str(warmup), "--rate",
                str(rate), "--arrival", "constant", "--max-tokens", "4", "--dataset", str(prompts))
    results = sorted(read_results(f"{prefix}_requests.jsonl"), key=lambda r: r.intended_start)
    assert len(results) == n and all(r.success for r in results) and len({r.worker for r in results}) == 2
    gaps = np.diff([r.intended_start for r in results])
    assert np.allclose(gaps, 1.0 / rate, atol=1e-6)  # one schedule, however the tickets were shared out
    assert [r.warmup for r in results] == [True] * warmup + [False] * (n - warmup)
    lags = [r.start_time - r.intended_start for r in results]
    assert min(lags) > -0.002 and np.percentile(lags, 99) < 0.05, sorted(lags)[-3:]
    stats = read_stats(prefix)
    assert int(stats[("", "Aggregated")]["Request Count"]) == n - warmup  # warm-up left out of the stats


def test_a_lost_worker_returns_its_tickets_and_the_run_still_ends(tmp_path, server_factory):
    """kill -9 one of two workers mid-run: the master says so in one line, records its requests in flight as
    lost, gives their tickets to the other worker and ends by --requests; raw log and Locust's stats agree."""
    url = server_factory("mock", "--mock-ttft-ms", "100", "--mock-itl-ms", "20")
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "lost"
    port = free_port()
    worker_cmd = locust_command("chat.py", url, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port))
    master = subprocess.Popen(locust_command("chat.py", url, "--master", "--headless", "--only-summary",
                                             "--expect-workers", "2", "--master-bind-host", "127.0.0.1",
                                             "--master-bind-port", str(port), "-u", "8", "-r", "8", "-t", "120s",
                                             "--csv", str(prefix), "--requests", "120", "--max-tokens", "10",
                                             "--ignore-eos", "--dataset", str(prompts)),
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [subprocess.Popen(worker_cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(2)]
    try:
        raw = Path(f"{prefix}_requests.jsonl")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not raw.is_file() or raw.read_text().count("\n") < 20):
            time.sleep(0.2)
        workers[0].kill()  # SIGKILL: no goodbye to the master
        started = time.monotonic()
        out, _ = master.communicate(timeout=90)
        took = time.monotonic() - started
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    assert master.returncode == 1, out[-3000:]  # the lost requests are failures
    lost_lines = [line for line in out.splitlines() if "was lost with" in line]
    assert len(lost_lines) == 1 and "recorded as lost, their tickets returned" in lost_lines[0], out[-3000:]
    results = read_results(raw)
    lost = [r for r in results if "lost" in r.flags]
    assert 1 <= len(lost) <= 8 and all(not r.success and "disappeared" in r.error for r in lost)
    assert len(results) - len(lost) == 120 and took < 60  # --requests real answers, after the loss too
    total = read_stats(prefix)[("", "Aggregated")]
    assert int(total["Request Count"]) == len(results) and int(total["Failure Count"]) == len(lost)
