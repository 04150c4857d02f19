"""The calibration: its statistics on simulated runs, the round trip through a file, and its bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from llmload.core.calibration import Calibration, CalibrationError, Spread
from llmload.core.stats import Interval, widened
from reports.calibrate import components, measure, spread_of
from reports.run import ReportError, load_run
from report_helpers import TEST_MACHINE, ScriptedRun, closed_loop, run_module, write_calibration


def one_run(rng, truth: float, tau: float, within: float) -> Interval:
    """One run's figure with its 95 % within-run interval: ``truth * exp(u + e)``, u ~ N(0, tau), e ~ N(0, within)."""
    value = truth * math.exp(rng.normal(0.0, tau) + rng.normal(0.0, within))
    return Interval(value, value * math.exp(-1.959964 * within), value * math.exp(1.959964 * within), 100)


@pytest.mark.unit
def test_the_spread_is_the_run_to_run_variance_beyond_the_within_run_one():
    """Method of moments on the log scale: between-repeat variance less the mean within-run variance."""
    rng = np.random.default_rng(1)
    spreads = [spread_of([components([one_run(rng, 10.0, 0.10, 0.03) for _ in range(8)]) for _ in range(20)]).sd
               for _ in range(20)]
    assert np.mean(spreads) == pytest.approx(0.10, abs=0.01)
    none = spread_of([components([one_run(rng, 10.0, 0.0, 0.05) for _ in range(8)]) for _ in range(20)])
    assert none.sd < 0.03 and none.df == 140 and none.cells == 20  # within-run error alone: (close to) no spread
    assert none.within == pytest.approx(0.05)
    assert components([one_run(rng, 10.0, 0.1, 0.03), Interval(5.0, n=3)]) is None  # a repeat without interval


@pytest.mark.unit
def test_a_single_run_widened_by_a_calibration_covers_the_mean_over_runs():
    """Runs vary 10 % from run to run and 3 % within: the within-run interval alone covers the cell's mean over
    runs about 45 % of the time; widened by a spread calibrated on 8 other runs (df 7), about 95 %, and a run
    whose own interval came out too narrow (a third of the width) still about 95 %: the calibration's typical
    within-run error sets the least width."""
    rng = np.random.default_rng(2)
    hits_within = hits_calibrated = hits_narrow = 0
    draws = 2000
    for _ in range(draws):
        spread = spread_of([components([one_run(rng, 10.0, 0.10, 0.03) for _ in range(8)])])
        iv = one_run(rng, 10.0, 0.10, 0.03)
        wide = widened(iv, spread.sd, spread.df, within=spread.within)
        narrow = Interval(iv.value, iv.value * (iv.low / iv.value) ** (1 / 3), iv.value * (iv.high / iv.value) ** (1 / 3))
        narrow = widened(narrow, spread.sd, spread.df, within=spread.within)
        hits_within += iv.low <= 10.0 <= iv.high
        hits_calibrated += wide.low <= 10.0 <= wide.high
        hits_narrow += narrow.low <= 10.0 <= narrow.high
    print(f"coverage of the mean over runs: within-run {hits_within / draws:.3f}, "
          f"calibrated {hits_calibrated / draws:.3f}, from a too narrow interval {hits_narrow / draws:.3f}")
    assert hits_within / draws < 0.6 and 0.93 <= hits_calibrated / draws <= 0.985
    assert 0.93 <= hits_narrow / draws <= 0.985


def repeated_run(path, factors, machine=TEST_MACHINE, servers=("basic",)) -> ScriptedRun:
    """``basic`` (and others) at qa stream c2, one repeat per factor: TTFT 50 ms x factor, 1 % request noise."""
    run = ScriptedRun(path, {"machine": machine})
    rng = np.random.default_rng(len(factors))
    for repeat, factor in enumerate(factors):
        for server in servers:
            run.add(server, "qa", "stream", 2, closed_loop(0.05 * factor * rng.lognormal(0, 0.01, 24), 2, prompts=24,
                                                          t0=1000.0 + 100 * repeat), repeat=repeat)
    return run


@pytest.mark.integration
def test_calibration_round_trip(tmp_path):
    """Repeats 4 at +20 % and 4 at -20 % (log): the spread of TTFT p50 is their sd (within-run error is 1 %)."""
    run = repeated_run(tmp_path / "run", [math.exp(0.2), math.exp(-0.2)] * 4)
    proc = run_module("reports.calibrate", run.path, "--out", tmp_path / "cal.json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / "cal.json") and "basic stream: run-to-run sd" in proc.stderr
    calibration = Calibration.load(tmp_path / "cal.json")
    assert calibration.machine == TEST_MACHINE and calibration.sources == [str(run.path)]
    expected = 0.2 * math.sqrt(8 / 7)
    for kind in (("basic", "qa", "stream", "c2"), ("basic", "qa", "stream", None), ("basic", None, "stream", None)):
        ttft = calibration.spreads[kind]["ttft_p50"]
        assert ttft.sd == pytest.approx(expected, rel=0.05) and ttft.df == 7 and 0 < ttft.within < 0.05
    found = calibration.for_cell("basic", "chat", "stream", "c4")  # another task: the server and mode pooled
    assert found["ttft_p50"].sd == pytest.approx(expected, rel=0.05)
    assert calibration.for_cell("vllm", "qa", "stream", "c2") == {}
    again = Calibration.load(calibration.save(tmp_path / "again.json"))
    assert again.spreads == calibration.spreads and again.machine == calibration.machine


@pytest.mark.integration
def test_calibrate_refuses_runs_without_repeats_or_from_two_machines(tmp_path):
    single = repeated_run(tmp_path / "single", [1.0])
    other = repeated_run(tmp_path / "other", [1.0, 1.1, 0.9], machine={**TEST_MACHINE, "cpu": "Other CPU"})
    mine = repeated_run(tmp_path / "mine", [1.0, 1.1, 0.9])
    for args, message in (((single.path,), "no cell has 2 or more completed repeats"),
                          ((mine.path, other.path), "the run folders come from different machines"),
                          ((tmp_path / "nowhere",), "is not a folder")):
        proc = run_module("reports.calibrate", *args, "--out", tmp_path / "cal.json")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    with pytest.raises(ReportError, match="does not say which machine"):
        measure([load_run(repeated_run(tmp_path / "unknown", [1.0, 1.1], machine=None).path)])


@pytest.mark.parametrize("content, message", [
    ("{not json", "invalid JSON"),
    (json.dumps({"format": "other"}), "'format' is not"),
    (json.dumps({"format": "llmload-calibration/1", "machine": {}}), "'spreads' list"),
    (json.dumps({"format": "llmload-calibration/1", "machine": {}, "spreads": [
        {"server": "basic", "mode": "stream", "figure": "ttft_p50", "sd": -0.1, "df": 3, "within": 0.1}]}),
     "spreads[0]: 'sd'"),
    (json.dumps({"format": "llmload-calibration/1", "machine": {}, "spreads": [
        {"server": "basic", "mode": "stream", "figure": "ttft_p50", "sd": 0.1, "df": 0, "within": 0.1}]}),
     "spreads[0]: 'df'"),
    (json.dumps({"format": "llmload-calibration/1", "machine": {}, "spreads": [
        {"server": "basic", "mode": "stream", "figure": "ttft_p50", "sd": 0.1, "df": 3}]}), "spreads[0]: 'within'"),
    (json.dumps({"format": "llmload-calibration/1", "machine": {}, "spreads": [{"mode": "stream"}]}),
     "spreads[0]: 'server'"),
])
@pytest.mark.unit
def test_a_malformed_calibration_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    from reports import compare, merge

    run = repeated_run(tmp_path / "run", [1.0])
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(CalibrationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Calibration.load(bad)
    for command, args in ((merge.main, [str(run.path), "--calibration", str(bad)]),
                          (compare.main, [str(run.path), str(run.path), "--calibration", str(bad)])):
        assert command(args) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: {bad}: ") and message in line, line


@pytest.mark.unit
def test_the_calibration_file_is_found_by_flag_environment_or_default(tmp_path, capsys, monkeypatch):
    from reports.calibrate import find_calibration
    from reports.merge import main

    good = write_calibration(tmp_path / "good.json", ("basic",))
    missing = tmp_path / "missing.json"
    assert find_calibration(good).path == good
    assert find_calibration(good, use=False) is None
    with pytest.raises(ReportError, match="no such calibration file"):
        find_calibration(missing)
    monkeypatch.setattr("llmload.core.calibration.DEFAULT_PATH", missing)
    monkeypatch.delenv("LLMLOAD_CALIBRATION")
    assert find_calibration() is None  # the default file, absent: no calibration
    monkeypatch.setattr("llmload.core.calibration.DEFAULT_PATH", good)
    assert find_calibration().path == good
    run = repeated_run(tmp_path / "run", [1.0])
    summary = run.path / "report" / "summary.md"
    monkeypatch.setenv("LLMLOAD_CALIBRATION", str(missing))
    assert main([str(run.path), "--no-tokenizer"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {missing}: no such calibration file")
    assert main([str(run.path), "--no-tokenizer", "--no-calibration"]) == 0
    assert "no calibration of this machine" in summary.read_text()
    monkeypatch.setenv("LLMLOAD_CALIBRATION", str(good))
    assert main([str(run.path), "--no-tokenizer"]) == 0 and "Run-to-run variation: calibration" in summary.read_text()
    monkeypatch.setenv("LLMLOAD_CALIBRATION", "none")
    assert find_calibration() is None


@pytest.mark.unit
def test_spreads_are_looked_up_from_the_cell_to_the_server_and_mode():
    calibration = Calibration(machine=TEST_MACHINE, spreads={
        ("basic", "qa", "stream", "c8"): {"ttft_p50": Spread(0.1, 7)},
        ("basic", None, "stream", None): {"ttft_p50": Spread(0.05, 50), "tpot_mean": Spread(0.04, 50)}})
    assert calibration.for_cell("basic", "qa", "stream", "c8") == {"ttft_p50": Spread(0.1, 7),
                                                                    "tpot_mean": Spread(0.04, 50)}
    assert calibration.for_cell("basic", "qa", "stream", "c1")["ttft_p50"] == Spread(0.05, 50)
    assert calibration.for_cell("basic", "qa", "sync", "c8") == {}
    assert calibration.same_machine(dict(TEST_MACHINE, platform="another kernel"))
    assert not calibration.same_machine(dict(TEST_MACHINE, cores=4)) and not calibration.same_machine(None)
