"""The distributed load-generator benchmark, end to end on small settings: real mock, real masters and workers."""

from __future__ import annotations

import json

import pytest

from benchmarks.loadgen_cluster import Run, cost, main


@pytest.mark.integration
@pytest.mark.slow
def test_master_cost_and_throughput_end_to_end(tmp_path, capsys):
    out = tmp_path / "bench"
    # HEAD as the baseline: the archive-and-run path without depending on how much history a clone has
    code = main(["--requests", "100", "--workers", "2", "--baseline", "HEAD", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    summary = json.loads((out / "summary.json").read_text())
    runs = summary["runs"]
    assert [(r["version"], r["workers"], r["requests"]) for r in runs] == [
        ("before", 1, 100), ("before", 1, 500), ("after", 1, 100), ("after", 1, 500), ("after", 2, 100)]
    for run in runs:
        assert run["error"] == "" and run["measured"] == run["requests"] and run["requests_per_s"] > 0
        assert run["master_cpu_s"] > run["master_startup_cpu_s"] > 0  # the kernel's count, start-up included
        assert run["workers_cpu_s"] > run["workers_startup_cpu_s"] > 0
    assert [c["version"] for c in summary["costs"]] == ["before", "after"]
    assert (out / "code-HEAD" / "llmload" / "loadgen" / "plugin.py").is_file()  # the baseline ran from its own tree
    assert "per request (the difference between the two master-cost runs" in printed.out
    assert "workers per master core" in printed.out


@pytest.mark.unit
def test_the_cost_per_request_is_the_slope_between_two_runs_after_start_up():
    small = Run("after", 1, 1000, master_cpu_s=1.0, workers_cpu_s=2.0, master_startup_cpu_s=0.8,
                workers_startup_cpu_s=0.9)
    large = Run("after", 1, 5000, master_cpu_s=1.3, workers_cpu_s=6.1, master_startup_cpu_s=0.9,
                workers_startup_cpu_s=1.0)  # a start-up 0.1 s dearer: it does not count
    c = cost(small, large)
    assert round(c.master_us, 6) == 50.0 and round(c.worker_us, 6) == 1000.0 and round(c.ratio, 6) == 0.05
    assert round(c.totals_ratio, 6) == round(1.3 / 6.1, 6)  # start-up included: what the whole run cost
