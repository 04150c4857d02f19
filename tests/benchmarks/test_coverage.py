"""The coverage benchmark: its check on scripted repeats with a known outlier, and end to end on the mock with
time-correlated speed (tiny settings)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from benchmarks.coverage import cell_coverage, expected_share, main
from llmload.core.metrics import RequestResult
from llmload.core.rawlog import write_results
from llmload.core.runfiles import Cell, append_cell, write_manifest
from prompt_sets import make_data
from reports.run import load_run


@pytest.mark.unit
def test_a_correct_interval_covers_the_others_mean_about_93_percent_at_8_repeats():
    assert expected_share(8) == pytest.approx(0.933, abs=1e-3) and expected_share(5) == pytest.approx(0.920, abs=1e-3)
    rng = np.random.default_rng(0)  # the formula against simulation: figures N(0, 1), intervals +-1.96
    values = rng.normal(size=(20000, 8))
    others = (values.sum(axis=1, keepdims=True) - values) / 7
    assert np.mean(np.abs(values - others) <= 1.959964) == pytest.approx(expected_share(8), abs=0.005)


def scripted_repeats(path, ttft_factors) -> list:
    """A run folder with one cell (basic qa stream c2) per factor: 24 requests, TTFT 50 ms x factor (+-1 %)."""
    write_manifest(path, {"command": "scripted", "machine": {"cpu": "Test CPU", "cores": 2}})
    rng = np.random.default_rng(1)
    for repeat, factor in enumerate(ttft_factors):
        cell = Cell("basic", "qa", "stream", 2, f"basic/qa_stream_c2_rep{repeat + 1}", repeat=repeat, status="ok")
        free, results = [1000.0 + 100 * repeat] * 2, []
        for i in range(24):
            user = int(np.argmin(free))
            ttft = 0.05 * factor * rng.lognormal(0, 0.01)
            offsets = [ttft + 0.01 * k for k in range(8)]
            results.append(RequestResult(request_id=f"r{i}", task="qa", api="chat", mode="stream",
                                         start_time=free[user], end_offset=offsets[-1] + 0.001, token_offsets=offsets,
                                         prompt_id=f"qa-{i}", status_code=200, output_tokens=8,
                                         output_tokens_source="usage"))
            free[user] += offsets[-1] + 0.001
        write_results(cell.files(path).raw_log, results)
        append_cell(path, cell)
    return [c for c in load_run(path).cells if c.ok]


@pytest.mark.unit
def test_one_slow_run_among_four_is_caught_by_the_cross_validated_calibration(tmp_path):
    """Three identical runs and one 3x slower: no run's within-run interval covers the others' mean; calibrated on
    the other three, the identical runs' intervals widen enough (the slow run is among their others), the slow
    run's does not (its others agree)."""
    rows = {r.figure: r for r in cell_coverage(scripted_repeats(tmp_path / "run", [1, 1, 1, 3]), "basic")}
    ttft = rows["ttft_p50"]
    assert ttft.repeats == 4 and ttft.spread > 0.5
    assert ttft.hits["old"] == ttft.hits["within-run"] == 0 and ttft.checked["within-run"] == 4
    assert ttft.hits["calibrated"] == 3 and ttft.half_widths["calibrated"] > 10 * ttft.half_widths["within-run"]


@pytest.mark.integration
@pytest.mark.slow
def test_the_benchmark_end_to_end_on_the_mock(tmp_path, capsys):
    data = make_data(tmp_path / "data", ("qa",), n=16)
    code = main(["--engines", "mock", "--repeat", "3", "--requests", "16", "--max-tokens", "8", "--concurrency", "4",
                 "--mock-speed-period-ms", "100", "--mock-speed-sd", "0.5", "--data-dir", str(data),
                 "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "a correct interval: 89.0 % at R = 3" in out and "all figures: old" in out
    for figure in ("output_token_throughput", "ttft_p50", "tpot_mean", "e2e_p50"):
        (line,) = [line for line in out.splitlines() if f"| {figure} " in line]
        assert line.startswith("| mock qa stream c4") and len(re.findall(r"\d/3 \(\d+ %\), \+-[\d.]+ %", line)) == 3
    cells = [c for c in load_run(tmp_path / "runs" / "mock").cells if c.ok]
    ttft = np.array([r.token_offsets[0] for c in cells for r in c.measured])
    assert len(cells) == 3 and ttft.max() > 1.5 * ttft.min()  # the runner's mock inherited the changing speed


@pytest.mark.unit
def test_fewer_than_3_repeats_is_one_line(capsys):
    assert main(["--repeat", "2"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --repeat must be at least 3")
