"""The soak benchmark end to end on a small run: real mock server, real Locust with its web UI, the raw log."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.soak import main
from llmload.core.metrics import SKETCH_RELATIVE_ACCURACY, request_metrics
from llmload.core.rawlog import read_results
from llmload.core.stats import interpolation_ranks, quantile_of

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_soak_prints_memory_poll_times_and_the_sketch_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("benchmarks.soak.STEP", 1000)
    code = main(["--requests", "4000", "--users", "8", "--poll-s", "1", "--out", str(tmp_path)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "4,000 requests in" in printed.out and "| 1,000 " in printed.out  # a line per step (1,000 here)
    errors = [float(line.split("|")[4]) for line in printed.out.splitlines() if line.startswith("| ttft_p")]
    assert errors and max(errors) < 5.0, printed.out  # against the interpolated quantile, printed
    # DDSketch's bound holds for the order statistics the interpolated quantile lies between
    ttfts = np.sort([m.ttft for m in map(request_metrics, read_results(tmp_path / "soak_requests.jsonl"))
                     if m.ttft is not None])
    live = json.loads((tmp_path / "soak_summary.json").read_text())["summary"]
    quantiles = {column: quantile_of(column[len("ttft_"):]) for column in live
                 if column.startswith("ttft_p") and live[column] is not None}
    assert quantiles, sorted(live)
    for column, q in quantiles.items():
        lo, hi, _ = interpolation_ranks(np.array(len(ttfts)), q)
        assert ttfts[lo] * (1 - SKETCH_RELATIVE_ACCURACY) <= live[column] <= \
            ttfts[hi] * (1 + SKETCH_RELATIVE_ACCURACY), (column, ttfts[lo], live[column], ttfts[hi])
    assert (tmp_path / "soak_requests.jsonl").read_text().count("\n") == 4000
