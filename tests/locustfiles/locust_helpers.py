"""Helpers for the Locust suite's tests: prompt files, servers, Locust runs as subprocesses, CSV reading.

Locust monkey-patches the process it runs in with gevent, so it always runs as
a subprocess here (``python -m locust`` in the repository root, as the runner
starts it); the test process never imports it.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from llmload.core.paths import REPO_ROOT
from llmload.core.records import PromptRecord, write_records
from llmload.core.services import ServiceProcess

TTFT_MS = 200.0
ITL_MS = 20.0
#: The scripted OpenAI-style server of good answers and faults (the ``fault_server`` fixture serves it).
FAULT_SERVER = Path(__file__).resolve().parents[1] / "llmload" / "core" / "fault_server.py"


def write_prompts(path: Path, task: str = "chat", count: int = 6, max_tokens: int = 64) -> Path:
    """A small prompt file of ``count`` records for ``task``; each text starts with ``[<record id>]``."""
    def text(i: int) -> str:
        return f"[{task}-{i}] Question {i}: what is {i} + {i}?"

    records = [PromptRecord(id=f"{task}-{i}", task=task, source="test", prompt=text(i),
                            messages=({"role": "user", "content": text(i)},), max_tokens=max_tokens,
                            input_tokens=8) for i in range(count)]
    write_records(path, records)
    return path


def locust_command(locustfile: str, host: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "locustfiles" / locustfile), "-H", host,
            "--loglevel", "INFO", *args]


def run_locust(locustfile: str, host: str, *args: str, timeout: float = 90, env: dict | None = None,
               headless: bool = True) -> subprocess.CompletedProcess:
    """Run Locust to its end (``--headless --only-summary`` unless told otherwise); stdout+stderr in ``.stdout``."""
    extra = ["--headless", "--only-summary"] if headless else []
    return subprocess.run(locust_command(locustfile, host, *extra, *args), cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def output(proc: subprocess.CompletedProcess) -> str:
    return (proc.stdout or "") + (proc.stderr or "")


def read_stats(prefix: Path) -> dict[tuple[str, str], dict]:
    """Locust's ``<prefix>_stats.csv`` keyed by (Type, Name); the Aggregated row is ('', 'Aggregated')."""
    with open(f"{prefix}_stats.csv", newline="") as handle:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(handle)}


def read_failures(prefix: Path) -> dict[str, int]:
    """Locust's ``<prefix>_failures.csv``: error message -> occurrences."""
    with open(f"{prefix}_failures.csv", newline="") as handle:
        return {row["Error"]: int(row["Occurrences"]) for row in csv.DictReader(handle)}



@contextmanager
def serving(name: str, cmd: list[str], port: int, log: Path, env: dict | None = None):
    """Run a server command until the block ends (ready once /health answers)."""
    proc = ServiceProcess(name, cmd, f"http://127.0.0.1:{port}/health", log, env=env)
    proc.start()
    try:
        proc.wait_ready(60)
        yield proc
    finally:
        proc.stop()
