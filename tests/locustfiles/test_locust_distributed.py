"""Distributed mode: a master and 2 to 4 local workers against the mock engine, on the suite's result path.

Each worker counts its own results and writes its own raw-log shard; the
master merges their reports (Locust's stats, the live figures, the shards'
bytes). The master's raw log must hold every request exactly once, agree with
Locust's stats and the summary, and ``--requests`` must hold over the whole
cluster. The workers get no options but the master's address: Locust forwards
the master's custom options (here --dataset, --mode, --requests ...) to them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from locust_helpers import locust_command, output, read_stats, run_locust, write_prompts
from trace_files import assert_replayed, write_trace
from llmload.core.metrics import summarize
from llmload.core.rawlog import read_results
from llmload.core.paths import REPO_ROOT
from llmload.core.services import free_port

pytestmark = pytest.mark.integration

REQUESTS = 37  # not a multiple of the users: the budget must stop at exactly this many


def worker_command(url: str, port: int, *args: str) -> list[str]:
    return locust_command("chat.py", url, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port), *args)


def master_command(url: str, port: int, workers: int, *args: str) -> list[str]:
    return locust_command("chat.py", url, "--master", "--headless", "--only-summary", "--expect-workers", str(workers),
                          "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), *args)


def run_cluster(url: str, prefix: Path, *args: str, workers: int = 2) -> str:
    """A headless master with ``workers`` local workers, to its end; asserts that all exit cleanly. Its output."""
    port = free_port()
    procs = [subprocess.Popen(worker_command(url, port), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(workers)]
    try:
        master = run_locust("chat.py", url, "--master", "--expect-workers", str(workers), "--master-bind-host",
                            "127.0.0.1", "--master-bind-port", str(port), "-t", "60s", "--csv", str(prefix), *args,
                            timeout=120)
        worker_logs = [w.communicate(timeout=30)[0] for w in procs]
    finally:
        for w in procs:
            if w.poll() is None:
                w.kill()
    log = output(master)
    assert master.returncode == 0, log[-3000:]
    assert all(w.returncode == 0 for w in procs), [text[-2000:] for text in worker_logs]
    assert "Traceback" not in log + "".join(worker_logs)
    return log


def assert_log_agrees_with_stats(prefix: Path, count: int, workers: int) -> list:
    """The raw log has ``count`` records, each once, from ``workers`` workers; Locust's stats and the summary
    count the same requests; no shard is left behind."""
    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == count and len({r.request_id for r in results}) == count  # each request exactly once
    per_worker = Counter(r.worker for r in results)
    assert len(per_worker) == workers and all(name and n > 0 for name, n in per_worker.items()), per_worker
    measured = [r for r in results if not r.warmup]
    stats = read_stats(prefix)
    assert int(stats[("", "Aggregated")]["Request Count"]) == len(measured)
    assert int(stats[("", "Aggregated")]["Failure Count"]) == sum(not r.success for r in measured)
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert summary["summary"]["requests"] == len(measured) and summary["raw_log"] == f"{prefix}_requests.jsonl"
    assert not Path(f"{prefix}_requests.shards").exists()  # every shard merged, then deleted by its worker
    return results


@pytest.mark.serial  # TPOT within 3 ms, dispatch lag within 50 ms
@pytest.mark.slow
def test_master_and_two_workers(mock_server, tmp_path):
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "dist"
    run_cluster(url, prefix, "-u", "8", "-r", "8", "--requests", str(REQUESTS), "--mode", "stream", "--max-tokens",
                "10", "--ignore-eos", "--dataset", str(prompts))
    results = assert_log_agrees_with_stats(prefix, REQUESTS, workers=2)
    assert all(r.success for r in results), [r.error for r in results if not r.success][:3]
    stats = read_stats(prefix)
    total = stats[("", "Aggregated")]
    assert int(total["Request Count"]) == int(stats[("POST", "chat /v1/chat/completions")]["Request Count"])
    for name in ("chat TTFT", "chat TPOT"):  # METRIC rows from both workers, not in the Aggregated total
        assert int(stats[("METRIC", name)]["Request Count"]) == REQUESTS
    s = summarize(results)
    assert float(total["Average Response Time"]) == pytest.approx(s.get("e2e", "mean") * 1000, abs=0.01)
    assert abs(s.get("ttft", "mean") * 1000 - 200) < 40 and abs(s.get("tpot", "mean") * 1000 - 20) < 3
    live = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]  # merged sketches: within 1 %
    assert live["ttft_p50"] == pytest.approx(s.get("ttft", "p50"), rel=0.02)


@pytest.mark.slow
def test_four_workers_share_requests_exactly(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "four"
    run_cluster(fast_mock, prefix, "-u", "8", "-r", "8", "--requests", "61", "--max-tokens", "4", "--ignore-eos",
                "--model", "mock", "--dataset", str(prompts), workers=4)
    assert_log_agrees_with_stats(prefix, 61, workers=4)


def test_locust_processes_run_on_the_same_path(fast_mock, tmp_path):
    """Locust's own --processes (a master and forked workers in one command) keeps the suite's guarantees."""
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "procs"
    proc = run_locust("chat.py", fast_mock, "--processes", "2", "-u", "4", "-r", "4", "-t", "60s", "--requests", "30",
                      "--max-tokens", "4", "--model", "mock", "--csv", str(prefix), "--dataset", str(prompts),
                      timeout=120)
    assert proc.returncode == 0 and "Traceback" not in output(proc), output(proc)[-3000:]
    assert_log_agrees_with_stats(prefix, 30, workers=2)


@pytest.mark.serial  # TPOT within 3 ms, dispatch lag within 50 ms
@pytest.mark.slow
def test_an_open_loop_with_warmup_keeps_one_schedule_over_both_workers(mock_server, tmp_path):
    """--rate and --warmup are the master's: one constant schedule and one warm-up over the whole cluster."""
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "open"
    rate, n, warmup = 20.0, 60, 5
    run_cluster(url, prefix, "-u", "16", "-r", "16", "--requests", str(n), "--warmup", str(warmup), "--rate",
                str(rate), "--arrival", "constant", "--max-tokens", "4", "--dataset", str(prompts))
    results = sorted(assert_log_agrees_with_stats(prefix, n, workers=2), key=lambda r: r.intended_start)
    assert all(r.success for r in results)
    gaps = np.diff([r.intended_start for r in results])
    assert np.allclose(gaps, 1.0 / rate, atol=1e-6)  # one schedule, however the tickets were shared out
    assert [r.warmup for r in results] == [True] * warmup + [False] * (n - warmup)
    lags = [r.start_time - r.intended_start for r in results]
    assert min(lags) > -0.002 and np.percentile(lags, 99) < 0.05, sorted(lags)[-3:]


def shard_lines(prefix: Path) -> int:
    folder = Path(f"{prefix}_requests.shards")
    return sum(path.read_bytes().count(b"\n") for path in folder.glob("*.jsonl")) if folder.is_dir() else 0


@pytest.mark.slow
def test_two_workers_replay_one_trace_on_its_timestamps(fast_mock, tmp_path):
    lines = write_trace(tmp_path / "trace.jsonl", 20, seed=1)
    prefix = tmp_path / "trace"
    run_cluster(fast_mock, prefix, "-u", "8", "-r", "8", "--api", "completion", "--trace",
                str(tmp_path / "trace.jsonl"))
    assert_log_agrees_with_stats(prefix, 20, workers=2)
    assert_replayed(Path(f"{prefix}_requests.jsonl"), lines, 1.0)


@pytest.mark.parametrize("stop, said, left", [(signal.SIGKILL, "was lost with", "lost"),
                                               (signal.SIGTERM, "left with", "left")])
@pytest.mark.slow
def test_a_lost_worker_returns_its_tickets_and_the_run_still_ends(tmp_path, server_factory, stop, said, left):
    """kill -9 one of two workers mid-run (or SIGTERM: it stops on its own, sending its last report): the master
    says so in one line, reads what a killed worker's shard holds beyond its last report, records its requests
    in flight as lost, gives its tickets to the other worker and ends by --requests; raw log and Locust's stats
    agree."""
    url = server_factory("mock", "--mock-ttft-ms", "100", "--mock-itl-ms", "20")
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "lost"
    port = free_port()
    master = subprocess.Popen(master_command(url, port, 2, "-u", "8", "-r", "8", "-t", "120s", "--csv", str(prefix),
                                             "--requests", "120", "--max-tokens", "10", "--ignore-eos", "--dataset",
                                             str(prompts)),
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [subprocess.Popen(worker_command(url, port), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and shard_lines(prefix) < 20:
            time.sleep(0.1)
        workers[0].send_signal(stop)  # SIGKILL: no goodbye to the master
        started = time.monotonic()
        out, _ = master.communicate(timeout=90)
        took = time.monotonic() - started
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    assert master.returncode == 1, out[-3000:]  # the lost requests are failures
    lost_lines = [line for line in out.splitlines() if said in line]
    assert len(lost_lines) == 1 and "recorded as lost, their tickets returned" in lost_lines[0], out[-3000:]
    raw = Path(f"{prefix}_requests.jsonl")
    results = read_results(raw)
    lost = [r for r in results if "lost" in r.flags]
    assert 1 <= len(lost) <= 8 and all(not r.success and "disappeared" in r.error for r in lost), lost_lines
    assert len(results) - len(lost) == 120 and took < 60  # --requests real answers, after the loss too
    assert len({r.request_id for r in results}) == len(results)
    total = read_stats(prefix)[("", "Aggregated")]
    assert int(total["Request Count"]) == len(results) and int(total["Failure Count"]) == len(lost)
    summary = json.loads(Path(f"{prefix}_summary.json").read_text())
    assert summary["summary"]["requests"] == len(results)
    assert [w["left"] for w in summary["workers"]].count(left) == 1


def wait_for(path: Path, text: str, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text(errors="replace"):
            return True
        time.sleep(0.1)
    return False


def test_a_worker_started_with_other_options_is_refused_in_one_line(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "refused"
    port = free_port()
    master_log = tmp_path / "master.log"
    with master_log.open("w") as sink:
        master = subprocess.Popen(master_command(fast_mock, port, 1, "-u", "2", "-r", "2", "-t", "60s", "--csv",
                                                 str(prefix), "--requests", "10", "--max-tokens", "4", "--model", "mock",
                                                 "--dataset", str(prompts)),
                                  cwd=REPO_ROOT, stdout=sink, stderr=subprocess.STDOUT, text=True)
        procs = [master]
        try:
            bad = subprocess.Popen(worker_command(fast_mock, port, "--mode", "sync"), cwd=REPO_ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(bad)
            bad_out, _ = bad.communicate(timeout=60)
            assert wait_for(master_log, "refused worker")
            good = subprocess.Popen(worker_command(fast_mock, port), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
            procs.append(good)
            master.wait(timeout=90)
            good.wait(timeout=30)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
    out = master_log.read_text()
    refusals = [line for line in out.splitlines() if "refused worker" in line]
    assert len(refusals) == 1 and "--mode sync" in refusals[0] and "the master with the default" in refusals[0], out
    errors = [line for line in bad_out.splitlines() if line.startswith("error:")]
    assert bad.returncode == 2 and len(errors) == 1 and "refused this worker" in errors[0], bad_out[-2000:]
    assert "Traceback" not in out + bad_out
    assert master.returncode == 0 and good.returncode == 0, out[-3000:]
    assert_log_agrees_with_stats(prefix, 10, workers=1)


def test_a_worker_that_cannot_write_its_shard_stops_and_the_master_names_it(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "noshard"
    Path(f"{prefix}_requests.shards").write_text("a file where the shard folder would go\n")
    port = free_port()
    worker = subprocess.Popen(worker_command(fast_mock, port), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        master = run_locust("chat.py", fast_mock, "--master", "--expect-workers", "1", "--master-bind-host",
                            "127.0.0.1", "--master-bind-port", str(port), "-u", "2", "-r", "2", "-t", "60s",
                            "--requests", "10", "--csv", str(prefix), "--model", "mock", "--dataset", str(prompts),
                            timeout=90)
        worker_out, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    out = output(master)
    errors = [line for line in worker_out.splitlines() if line.startswith("error:")]
    assert worker.returncode == 2 and len(errors) == 1 and "cannot write the raw-log shard" in errors[0], worker_out
    named = [line for line in out.splitlines() if "stopped: cannot write the raw-log shard" in line]
    assert len(named) == 1 and master.returncode == 1, out[-3000:]
    assert "Traceback" not in out + worker_out


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_the_web_ui_of_a_master_shows_the_merged_figures(mock_server, tmp_path):
    """The LLM metrics tab, its live charts and the raw-log download of a master come from its workers' reports."""
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    port, web_port = free_port(), free_port()
    web = f"http://127.0.0.1:{web_port}"
    master = subprocess.Popen(locust_command("chat.py", url, "--master", "--expect-workers", "2", "--master-bind-host",
                                             "127.0.0.1", "--master-bind-port", str(port), "--web-host", "127.0.0.1",
                                             "--web-port", str(web_port), "--autostart", "--autoquit", "3", "-u", "4",
                                             "-r", "4", "--requests", "40", "--max-tokens", "10", "--ignore-eos",
                                             "--dataset", str(prompts)),
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [subprocess.Popen(worker_command(url, port), cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(2)]
    try:
        deadline, rows, live, raw = time.monotonic() + 60, [], {}, b""
        while time.monotonic() < deadline:
            try:
                stats = get_json(f"{web}/stats/requests")
                rows = {t["key"]: t["data"] for t in stats.get("extended_stats", [])}.get("llm-metrics", [])
                live = get_json(f"{web}/llmload/live.json?since=0")
                if stats["state"] == "stopped" and rows and rows[0]["requests"] == 40:
                    with urllib.request.urlopen(f"{web}/llmload/requests.jsonl", timeout=5) as response:
                        raw = response.read()
                    break
            except OSError:
                pass
            time.sleep(0.3)
        out, _ = master.communicate(timeout=60)
        for w in workers:
            w.wait(timeout=30)
    finally:
        for proc in (master, *workers):
            if proc.poll() is None:
                proc.kill()
    assert rows and rows[0]["requests"] == 40 and 190 <= float(rows[0]["ttftp50"]) <= 240, rows
    points = [p for p in live["history"] if p["requests_per_s"] > 0]
    assert points and all(190 <= p["ttft_p50_ms"] <= 260 for p in points if p["ttft_p50_ms"]), live["history"]
    assert [p["time"] for p in live["history"]] == sorted(p["time"] for p in live["history"])
    records = [json.loads(line) for line in raw.splitlines()]
    assert len(records) == 40 and len({r["worker"] for r in records}) == 2  # the merged raw log, downloaded
    assert master.returncode == 0 and "Traceback" not in out, out[-3000:]
