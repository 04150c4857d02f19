"""Results that survive the process: the raw log under SIGKILL and SIGTERM, checked against the server's record.

The recording mock (zero delays, so requests finish as fast as one Locust
process can drive them) writes when it sent each answer's last byte; every
answer sent more than a second before Locust was killed must be in the raw
log, which stays valid JSON Lines up to its last complete line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.recording_mock import read_record, start_recording_mock
from locust_helpers import locust_command, write_prompts
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import iter_results
from llmload.core.services import free_port

pytestmark = pytest.mark.integration

PROMPTS = 30000  # more than a run sends: every request has its own [id]


@pytest.fixture
def zero_delay_mock(tmp_path):
    record = tmp_path / "tokens.jsonl"
    server = start_recording_mock(record, 0.0, 0.0, tmp_path / "server.log")
    try:
        yield server.base_url, record
    finally:
        server.stop()


def start_run(url: str, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    prompts = write_prompts(tmp_path / "many.jsonl", count=PROMPTS, max_tokens=4)
    prefix = tmp_path / "soak"
    proc = subprocess.Popen(locust_command("chat.py", url, "--headless", "--only-summary", "-u", "16", "-r", "16",
                                           "-t", "60s", "--csv", str(prefix), "--dataset", str(prompts),
                                           "--max-tokens", "4", "--ignore-eos", "--model", "mock"),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, Path(f"{prefix}_requests.jsonl")


def answered_before(record: Path, moment: float) -> set[str]:
    _, bodies = read_record(record)
    return {key for key, sent in bodies.items() if min(sent) < moment}


def test_sigkill_loses_nothing_that_finished_a_second_earlier(zero_delay_mock, tmp_path):
    url, record = zero_delay_mock
    proc, raw = start_run(url, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not raw.is_file() or raw.stat().st_size < 300_000):
            time.sleep(0.2)
        time.sleep(2.0)  # so that a second before the kill, the log already held some 600 records
        killed_at = time.time()
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = raw.read_text(encoding="utf-8").split("\n")
    for line in lines[:-1]:  # every complete line is a whole JSON record
        json.loads(line)
    logged = {r.prompt_id for r in iter_results(raw)}
    finished = answered_before(record, killed_at - 1.0)
    assert len(finished) > 500, len(finished)  # the run was well under way
    missing = finished - logged
    assert not missing, f"{len(missing)} of {len(finished)} answers sent >1 s before the kill are not in the log"


@pytest.mark.slow
def test_sigterm_is_one_clean_shutdown_with_the_log_and_summary_complete(zero_delay_mock, tmp_path):
    url, record = zero_delay_mock
    proc, raw = start_run(url, tmp_path)
    try:
        time.sleep(5)
        stopped_at = time.time()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in out and "SystemExit" not in out, out[-3000:]
    assert out.count("Shutting down") == 1 and proc.returncode == 0, out[-3000:]
    results = list(iter_results(raw))
    assert {r.prompt_id for r in results} >= answered_before(record, stopped_at - 0.5)
    summary = json.loads(raw.with_name("soak_summary.json").read_text())
    assert summary["summary"]["requests"] == len(results) and summary["raw_log"] == str(raw)
    stats = (raw.with_name("soak_stats.csv")).read_text().splitlines()
    aggregated = next(line for line in stats if ",Aggregated," in line)
    assert int(aggregated.split(",")[2]) == len(results)  # Locust's stats and the raw log agree


def test_sigterm_also_ends_a_run_with_the_web_ui(zero_delay_mock, tmp_path):
    url, _ = zero_delay_mock
    prompts = write_prompts(tmp_path / "p.jsonl", count=50, max_tokens=4)
    proc = subprocess.Popen(locust_command("chat.py", url, "--web-host", "127.0.0.1", "--web-port",
                                           str(free_port()), "--autostart", "-u", "4", "-r", "4", "--model", "mock",
                                           "--dataset", str(prompts), "--raw-log", str(tmp_path / "ui.jsonl")),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(4)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "Traceback" not in out and out.count("Shutting down") == 1, out[-3000:]
    assert sum(1 for _ in iter_results(tmp_path / "ui.jsonl")) > 10
