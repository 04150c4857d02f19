"""The steady-window benchmark prints every scenario's errors side by side."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT


@pytest.mark.integration
def test_benchmark_prints_each_scenario():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.steady_window", "--seeds", "2"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| closed") or line.startswith("| open")]
    assert len(rows) == 8, proc.stdout
    first = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert first[1] == "0" and abs(float(first[3])) < 3.0  # 8 users over 20 s: the start found within 3 %
