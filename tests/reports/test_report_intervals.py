"""Intervals in the merged report: CSV columns, Markdown text, the sample rule, what each interval covers, paired
server ratios with and without a calibration, repeats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.core.metrics import column_title
from llmload.core.stats import CALIBRATED, WITHIN_RUN, min_samples, repeat_ratio_interval, t_quantile
from reports.format import number
from reports.merge import merge_run
from report_helpers import ScriptedRun, closed_loop, read_csv, write_calibration

pytestmark = pytest.mark.unit


def f(text: str) -> float | None:
    return None if text == "" else float(text)


def servers_run(path, ratio: float = 2.0, n: int = 40, repeats: int = 1, blocks: tuple | None = None
                ) -> ScriptedRun:
    """``vllm`` with TTFT ``ratio`` x ``basic``'s on the same prompts (prompt i costs 1 + i/n), stream, 2 users.

    ``blocks``: the repeats ran in blocks of an interleaved order, each block slowing both servers by its factor
    (None: a sequential run, no blocks)."""
    run = ScriptedRun(path, {"baseline": "vllm"})
    for repeat in range(repeats):
        rng = np.random.default_rng(repeat)
        cost = (1.0 + np.arange(n) / n) * (blocks[repeat] if blocks else 1.0)
        for server, scale in (("basic", 0.05), ("vllm", 0.05 * ratio)):
            ttfts = scale * cost * rng.lognormal(0.0, 0.05, n)
            run.add(server, "qa", "stream", 2, closed_loop(ttfts, 2, prompts=n, t0=1000.0 + 100 * repeat),
                    repeat=repeat, block=repeat + 1 if blocks else None)
    return run


def test_csv_intervals_and_counts_follow_the_sample_rule(tmp_path):
    run = servers_run(tmp_path / "run", n=40)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False).read_text()
    rows = read_csv(tmp_path / "r" / "summary.csv")
    for row in rows:
        assert row["ttft_n"] == "40" and int(row["itl_n"]) == 40 * 7
        for column in ("ttft_p50", "ttft_p90", "e2e_mean", "output_token_throughput", "itl_p50"):
            low, value, high = f(row[f"{column}_ci_low"]), f(row[column]), f(row[f"{column}_ci_high"])
            assert low <= value <= high, column
            assert row[f"{column}_ci_covers"] == WITHIN_RUN
        assert row["ttft_p99"] != "" and row["ttft_p99_ci_low"] == row["ttft_p99_ci_high"] == ""  # 40 < 368
        assert "dispatch_lag_max_ci_low" not in row  # a maximum never gets an interval
    header = next(line for line in md.splitlines() if line.startswith("| server"))
    line = next(line for line in md.splitlines() if line.startswith("| basic"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in line.split("|")]))
    assert cells[column_title("ttft_p99")] == f"n=40<{min_samples('p99')}"
    low, high = f(rows[0]["ttft_p50_ci_low"]) * 1000, f(rows[0]["ttft_p50_ci_high"]) * 1000
    assert cells[column_title("ttft_p50")].endswith(f"[{low:.1f}, {high:.1f}]") and cells["intervals"] == WITHIN_RUN


def test_small_cells_print_no_percentile_and_no_interval(tmp_path):
    run = servers_run(tmp_path / "run", n=8)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False).read_text()
    line = next(line for line in md.splitlines() if line.startswith("| basic"))
    assert "n=8<36" in line and "n=8<368" in line and "(n=8)" in line  # p90, p99; a mean without interval
    rows = read_csv(tmp_path / "r" / "summary.csv")
    assert rows[0]["tpot_mean_ci_low"] == "" and rows[0]["ttft_p50_ci_low"] != ""  # p50 needs 6, a mean 10


def test_the_report_is_reproducible(tmp_path):
    run = servers_run(tmp_path / "run")
    merge_run(run.path, tmp_path / "one", use_tokenizer=False)
    merge_run(run.path, tmp_path / "two", use_tokenizer=False)
    for name in ("summary.csv", "ratios.csv", "summary.md"):
        assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text(), name


def test_without_a_calibration_ratios_are_within_run_and_not_judged(tmp_path):
    run = servers_run(tmp_path / "run", ratio=2.0)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False).read_text()
    ratios = {r["metric"]: r for r in read_csv(tmp_path / "r" / "ratios.csv")}
    ttft = ratios["ttft_p50"]
    assert ttft["ratio"] == "vllm / basic" and ttft["method"] == "paired" and ttft["pairs"] == "40"
    assert f(ttft["ci_low"]) > 1.0 and ttft["covers"] == WITHIN_RUN and ttft["significant"] == ""
    assert md.count("not marked significant") == 1 and "no calibration of this machine" in md
    assert " *" not in md.split("## Ratios")[1].split("##")[0]


@pytest.mark.parametrize("truth, significant", [(2.0, "True"), (1.0, "False")])
def test_a_calibration_widens_single_runs_and_judges_their_ratios(tmp_path, truth, significant):
    run = servers_run(tmp_path / "run", ratio=truth)
    calibration = write_calibration(tmp_path / "calibration.json", ("basic", "vllm"), sd=0.03)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False, calibration=calibration).read_text()
    merge_run(run.path, tmp_path / "within", use_tokenizer=False)
    ratios = {r["metric"]: r for r in read_csv(tmp_path / "r" / "ratios.csv")}
    ttft = ratios["ttft_p50"]
    assert f(ttft["ci_low"]) <= f(ttft["value"]) <= f(ttft["ci_high"]) and ttft["covers"] == CALIBRATED
    assert abs(f(ttft["value"]) - truth) < 0.1 * truth and ttft["significant"] == significant
    assert ratios["ttft_p99"]["ci_low"] == "" and ratios["ttft_p99"]["significant"] == ""  # too few
    assert (" *" in md.split("## Ratios")[1].split("##")[0]) == (truth != 1.0)
    assert "Run-to-run variation: calibration" in md and "not marked significant" not in md
    wide, narrow = read_csv(tmp_path / "r" / "summary.csv")[0], read_csv(tmp_path / "within" / "summary.csv")[0]
    assert wide["ttft_p50_ci_covers"] == CALIBRATED and narrow["ttft_p50_ci_covers"] == WITHIN_RUN
    assert f(wide["ttft_p50_ci_low"]) < f(narrow["ttft_p50_ci_low"]) <= f(narrow["ttft_p50_ci_high"]) < f(
        wide["ttft_p50_ci_high"])


def test_a_calibration_from_another_machine_is_not_used_and_the_report_says_so(tmp_path):
    run = servers_run(tmp_path / "run", ratio=2.0)
    other = {"cpu": "Another CPU", "cores": 64, "memory_gib": 512.0, "gpus": ["GPU 0: H100"]}
    calibration = write_calibration(tmp_path / "calibration.json", ("basic", "vllm"), machine=other)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False, calibration=calibration).read_text()
    (line,) = [line for line in md.splitlines() if "another machine" in line]
    assert "Another CPU, 64 cores" in line and "Test CPU, 2 cores" in line and "is not used" in line
    ttft = {r["metric"]: r for r in read_csv(tmp_path / "r" / "ratios.csv")}["ttft_p50"]
    assert ttft["covers"] == WITHIN_RUN and ttft["significant"] == ""


def test_repeats_give_every_figure_a_t_interval_across_them(tmp_path):
    """Each figure all 3 repeats have: their mean with Student's t interval, `across 3 repeats`; a p99 only the
    pooled requests can give keeps its pooled within-run interval, marked so; ratios: Welch's t over repeats."""
    run = servers_run(tmp_path / "run", repeats=3, n=12)
    md = merge_run(run.path, tmp_path / "r", use_tokenizer=False).read_text()
    cells = read_csv(tmp_path / "r" / "summary.csv")
    assert sorted(int(r["repeat"]) for r in cells if r["server"] == "basic") == [0, 1, 2]
    header = [c.strip() for c in next(line for line in md.splitlines() if line.startswith("| server")).split("|")]
    line = [c.strip() for c in next(line for line in md.splitlines() if line.startswith("| basic")).split("|")]
    shown = dict(zip(header, line))
    assert shown["repeats"] == "3" and shown["intervals"] == "across 3 repeats"
    for column in ("output_token_throughput", "ttft_p50"):
        per_repeat = [f(r[column]) for r in cells if r["server"] == "basic"]
        mean = sum(per_repeat) / 3
        half = t_quantile(2) * float(np.std(per_repeat, ddof=1)) / math.sqrt(3)
        scale = 1000.0 if column == "ttft_p50" else 1.0
        assert shown[column_title(column)] == \
            f"{number(mean * scale)} [{number((mean - half) * scale)}, {number((mean + half) * scale)}]"
    assert shown[column_title("ttft_p90")].endswith(f"({WITHIN_RUN})")  # 36 pooled values, 12 per repeat
    ratios = {r["metric"]: r for r in read_csv(tmp_path / "r" / "ratios.csv")}
    assert ratios["output_token_throughput"]["method"] == "repeats"
    assert ratios["ttft_p50"]["method"] == "repeats" and ratios["ttft_p50"]["significant"] == "True"
    assert ratios["ttft_p50"]["covers"] == "across 3 + 3 repeats"


def test_interleaved_repeats_pair_their_ratios_by_block(tmp_path):
    """Repeats in blocks that slow both servers alike (by 0.7, 1 and 1.4): the ratio's interval is Student's t over
    each block's ratio, `across 3 paired repeats`, far narrower than Welch's t over the same figures unpaired."""
    run = servers_run(tmp_path / "run", repeats=3, n=12, blocks=(0.7, 1.0, 1.4))
    merge_run(run.path, tmp_path / "r", use_tokenizer=False)
    cells = read_csv(tmp_path / "r" / "summary.csv")
    ratios = {r["metric"]: r for r in read_csv(tmp_path / "r" / "ratios.csv")}
    ttft = ratios["ttft_p50"]
    assert ttft["method"] == "paired repeats" and ttft["covers"] == "across 3 paired repeats"
    per = {s: [f(r["ttft_p50"]) for r in sorted(cells, key=lambda r: r["repeat"]) if r["server"] == s]
           for s in ("vllm", "basic")}
    logs = np.log(per["vllm"]) - np.log(per["basic"])
    half = t_quantile(2) * float(np.std(logs, ddof=1)) / math.sqrt(3)
    assert f(ttft["ci_low"]) == pytest.approx(math.exp(logs.mean() - half))
    assert f(ttft["ci_high"]) == pytest.approx(math.exp(logs.mean() + half))
    assert f(ttft["value"]) == pytest.approx(sum(per["vllm"]) / sum(per["basic"]))
    welch = repeat_ratio_interval(per["vllm"], per["basic"])
    assert ttft["significant"] == "True" and not welch.excludes_one  # the block effect hides it from Welch
    assert f(ttft["ci_high"]) / f(ttft["ci_low"]) < (welch.high / welch.low) ** 0.5
