"""The tune's report on scripted tune folders of known capacities: the ranking, the significance of each
comparison (paired by block, or from the searches' intervals) after Holm's correction, the Pareto front, the best
configuration and its margin, and report.json read back as it was written."""

from __future__ import annotations

import math

import pytest

from llmload.core.runfiles import write_tune
from llmload.core.stats import Interval, block_ratio_interval, block_ratio_p_value, holm
from reports.run import ReportError
from reports.sections import capacity_ratio
from reports.tune import (NOT_JUDGED, PAIRED, TuneReport, build_tune_report, capacity_p_value, markdown,
                          write_tune_report)
from report_helpers import ScriptedRun, open_loop, searched

pytestmark = pytest.mark.unit


def scripted_tune(folder, capacities: dict[str, list[float]], ttft: dict[str, float], failed: dict | None = None,
                  errors: dict[str, int] | None = None, max_error_rate: float | None = None):
    """A tune folder: each configuration's capacity search per block (``capacities``), and the cells of its
    highest held rate (TTFT ``ttft``; ``errors``: that many of its 40 requests failed); ``failed``:
    configurations whose server did not start, and why."""
    failed, errors = failed or {}, errors or {}
    names = list(capacities) + list(failed)
    blocks = max(len(v) for v in capacities.values())
    runs = []
    for name, values in capacities.items():
        for block, capacity in enumerate(values, 1):
            path = folder / "runs" / name / f"b{block}"
            run = ScriptedRun(path)
            entry = searched(capacity, 10.0, name)
            held = entry["bracket"][0]
            results = open_loop(held, 40, ttft[name], slo_ttft=1.0)
            for r in results[:errors.get(name, 0)]:
                r.success, r.status_code, r.error, r.slo_ok = False, 500, "HTTP 500", False
            run.add(name, "qa", "stream", 40, results, rate=held, phase="capacity", block=1)
            (path / "capacity.jsonl").write_text(__import__("json").dumps(entry) + "\n")
            runs.append({"config": name, "block": block, "dir": f"runs/{name}/b{block}", "state": "done",
                         "error": "", "attempts": 1})
    for name, why in failed.items():
        runs += [{"config": name, "block": b, "dir": f"runs/{name}/b{b}", "state": "failed", "error": why,
                  "attempts": 1} for b in range(1, blocks + 1)]
    write_tune(folder, {"command": "llmload tune (scripted)", "blocks": blocks, "slo": {"ttft": 1000.0},
                        "slo_target": 90.0, "order": {"description": "scripted"},
                        "configurations": [{"name": n, "server": n.split("[")[0], "kind": "mock",
                                            "args": f"--flag {i}"} for i, n in enumerate(names)],
                        "runs": runs, "max_error_rate": max_error_rate, "machine": {"cpu": "Test CPU", "cores": 2, "memory_gib": 8.0}})
    return folder


def test_with_blocks_the_ranking_pairs_by_block_and_holm_decides(tmp_path):
    folder = scripted_tune(tmp_path / "t", {"m[a]": [8.3, 8.0, 8.6], "m[b]": [4.0, 4.4, 3.8],
                                            "m[c]": [4.2, 4.0, 4.6]},
                           {"m[a]": 0.05, "m[b]": 0.05, "m[c]": 0.2}, failed={"m[d]": "server failed to start: x"})
    report = build_tune_report(folder)
    ranked = [s for s in report.ranking if s.rank is not None]
    assert [s.config for s in ranked] == ["m[a]", "m[c]", "m[b]"]
    assert all(s.method == "Student's t over 3 blocks" and s.capacity.covers == "across 3 repeats" for s in ranked)
    unranked = [s for s in report.ranking if s.rank is None]
    assert [(s.config, s.note) for s in unranked] == [("m[d]", "failed: server failed to start: x")]
    found = {(c.top, c.bottom): c for c in report.comparisons}
    assert set(found) == {("m[a]", "m[c]"), ("m[c]", "m[b]"), ("m[a]", "m[b]")}
    assert found[("m[a]", "m[c]")].adjacent and found[("m[a]", "m[c]")].versus_best
    assert not found[("m[a]", "m[b]")].adjacent and found[("m[c]", "m[b]")].adjacent
    searches = {(s.config, s.block): s.capacity_rps for s in report.searches}
    for (top, bottom), c in found.items():
        tops = {b: searches[(top, b)] for b in (1, 2, 3)}
        bottoms = {b: searches[(bottom, b)] for b in (1, 2, 3)}
        assert c.method == PAIRED and c.ratio == block_ratio_interval(tops, bottoms)
        assert c.p_value == pytest.approx(block_ratio_p_value(tops, bottoms))
    assert holm([c.p_value for c in report.comparisons]) == [c.p_holm for c in report.comparisons]
    assert found[("m[a]", "m[c]")].significant and found[("m[a]", "m[b]")].significant
    assert found[("m[c]", "m[b]")].significant is False
    (best,) = report.best
    assert best.config == "m[a]" and best.next == "m[c]" and best.significant
    assert best.sentence.startswith("qa stream: m[a]: capacity ")
    assert f"{(best.margin.value - 1) * 100:.0f} % [{(best.margin.low - 1) * 100:.0f}, " in best.sentence
    assert "above the next, m[c] (significant after Holm's correction: p = " in best.sentence
    # the Pareto front: each configuration at its capacity, m[a] the most output tok/s: on both fronts
    points = {p.config: p for p in report.pareto}
    assert set(points) == {"m[a]", "m[b]", "m[c]"} and all(p.blocks == 3 for p in points.values())
    assert points["m[a]"].front_per_user and points["m[a]"].front_latency
    assert points["m[a]"].output.value > points["m[c]"].output.value
    assert points["m[a]"].output.covers == "across 3 repeats"
    # m[c]: slower first tokens at about the same rate as m[b]: dominated on the TTFT front by m[a]
    assert not points["m[c]"].front_latency
    beats = [d for d in report.dominations if d.loser == "m[c]" and d.axis == "latency"]
    assert beats and all(d.p_value is not None and d.method.startswith(PAIRED) for d in beats)
    assert report.warnings == ["m[d]: server failed to start: x"]
    # written and read back: the same report
    md = write_tune_report(report, tmp_path / "out")
    loaded = TuneReport.load(tmp_path / "out" / "report.json")
    assert loaded.to_builtins() == report.to_builtins()
    text = md.read_text()
    assert "## Ranking: qa stream" in text and "| 1      | m[a]" in text and best.sentence in text
    assert markdown(loaded) == text


def test_one_block_compares_the_searches_intervals(tmp_path):
    folder = scripted_tune(tmp_path / "t", {"m[x]": [8.3], "m[y]": [4.1], "m[z]": [8.0]},
                           {"m[x]": 0.05, "m[y]": 0.05, "m[z]": 0.05})
    report = build_tune_report(folder)
    assert [s.config for s in report.ranking] == ["m[x]", "m[z]", "m[y]"]
    x = report.ranking[0]
    assert x.blocks == 1 and x.capacity.covers == "the search's decisions (one run)"
    entries = {s.config: s.entry for s in report.searches}
    assert x.capacity.value == entries["m[x]"]["capacity_rps"] and x.capacity.low == entries["m[x]"]["ci_low"]
    found = {(c.top, c.bottom): c for c in report.comparisons}
    close, far = found[("m[x]", "m[z]")], found[("m[z]", "m[y]")]
    for c in (close, far):
        iv, _ = capacity_ratio(entries[c.top], entries[c.bottom])
        assert (c.ratio.low, c.ratio.high) == (iv.low, iv.high)
        # the p-value inverts the same intervals: at most 0.05 exactly when the 95 % interval excludes 1
        assert (c.p_value <= 0.05) == bool(iv.excludes_one), (c.p_value, iv)
    assert close.significant is False and far.significant
    assert [c.p_holm for c in report.comparisons] == holm([c.p_value for c in report.comparisons])
    assert far.p_holm > far.p_value  # three comparisons: Holm's factor of 2 or 3
    assert all(d.significant is None and d.method == NOT_JUDGED for d in report.dominations)
    assert all(p.covers == "within-run only" for p in report.pareto)


def test_capacity_p_value_is_monotone_in_the_gap():
    base = searched(8.0, 10.0, "a")
    ps = [capacity_p_value(searched(c, 10.0, "b"), base) for c in (8.0, 6.0, 4.0, 2.0)]
    assert ps[0] == 1.0 and all(a >= b for a, b in zip(ps, ps[1:])) and ps[-1] < 0.05, ps
    assert capacity_p_value({"bracket": [1, 2]}, base) is None


def test_holm_and_the_paired_test():
    assert holm([0.01, 0.04, 0.03, None]) == [0.03, pytest.approx(0.06), pytest.approx(0.06), None]
    assert holm([0.5, 0.001]) == [0.5, 0.002]
    top, bottom = {1: 2.0, 2: 2.2, 3: 1.9}, {1: 1.0, 2: 1.0, 3: 1.0}
    p = block_ratio_p_value(top, bottom)
    iv = block_ratio_interval(top, bottom)
    assert iv.excludes_one and p < 0.05
    logs = [math.log(2.0), math.log(2.2), math.log(1.9)]
    mean = sum(logs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    from scipy import stats

    assert p == pytest.approx(stats.ttest_1samp(logs, 0.0).pvalue)
    assert iv.low == pytest.approx(math.exp(mean - stats.t.ppf(0.975, 2) * sd / math.sqrt(3)), rel=1e-3)
    assert block_ratio_p_value({1: 2.0}, {1: 1.0}) is None
    assert block_ratio_p_value({1: 2.0, 2: 2.0}, {1: 1.0, 2: 1.0}) == 0.0


def test_a_folder_that_is_not_a_tune_is_one_line(tmp_path):
    with pytest.raises(ReportError, match="has no tune.json"):
        build_tune_report(tmp_path)
    (tmp_path / "report.json").write_text('{"format": "llmload-report"}')
    with pytest.raises(ReportError, match="not a tune report"):
        TuneReport.load(tmp_path / "report.json")
    assert Interval(1.0).value == 1.0


def test_a_configuration_whose_requests_fail_too_often_is_not_ranked(tmp_path):
    folder = scripted_tune(tmp_path / "t", {"m[x]": [8.3], "m[y]": [4.1]}, {"m[x]": 0.05, "m[y]": 0.05},
                           errors={"m[x]": 4}, max_error_rate=0.05)
    report = build_tune_report(folder)
    x = next(c for c in report.configs if c.name == "m[x]")
    assert (x.requests, x.failures) == (40, 4)
    assert x.excluded == "10.0% of its requests failed, above --max-error-rate 0.05"
    assert [(s.config, s.rank) for s in report.ranking] == [("m[y]", 1), ("m[x]", None)]
    assert report.ranking[1].note == f"not ranked: {x.excluded}" and report.comparisons == []
    assert report.best[0].config == "m[y]" and "the only configuration that held a rate" in report.best[0].sentence
    assert f"m[x]: not ranked: {x.excluded}" in report.warnings
