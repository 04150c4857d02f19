"""The stream-parsing benchmark reads every stream with both trees and prints their ratio."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT


@pytest.mark.integration
def test_benchmark_prints_each_stream_for_both_trees():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.stream_parsing", "--tokens", "8", "--rounds", "2",
                           "--seconds", "0.01", "--reference", str(REPO_ROOT)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in proc.stdout.splitlines()
            if line.startswith(("| chat", "| completion", "| responses"))]
    assert len(rows) == 6, proc.stdout
    for _, this, reference, ratio, _ in rows:  # the same tree twice: the same reader
        assert float(this.replace(",", "")) > 0 and float(reference.replace(",", "")) > 0 and float(ratio) > 0


@pytest.mark.integration
def test_a_reference_that_is_not_a_checkout_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "benchmarks.stream_parsing", "--reference", "/nonexistent"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --reference /nonexistent: not a checkout")
