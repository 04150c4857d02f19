"""The typed report saved as report.json: the round trip, the format version, old run folders, and compare reading it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from llmload.core.formats import FORMAT_VERSION
from llmload.core.rawlog import read_results
from llmload.core.runfiles import read_manifest
from reports import compare as compare_module
from reports.compare import compare_runs
from reports.merge import build_report, main, write_report
from reports.report import REPORT_JSON, Report, saved_report
from reports.rows import Ratio, Row
from reports.run import ReportError, load_run
from reports.sections import CapacityRow, RepeatRow, SeriesRow
from reports.steady import SteadyRow
from report_helpers import ScriptedRun, closed_loop, monitor_rows, open_loop, read_csv, searched

pytestmark = pytest.mark.unit


def every_section(path) -> ScriptedRun:
    """Two servers with repeats in blocks, a monitor's server series, cancels, a sweep, capacity searches and a
    failed cell: every section of the report has rows."""
    run = ScriptedRun(path, {"baseline": "vllm", "slo": {"ttft": 1000.0},
                             "settings": {"price_per_hour": {"vllm": 2.0, "basic": 1.0}}})
    rng = np.random.default_rng(4)
    for repeat in range(2):
        for server, ttft in (("vllm", 0.05), ("basic", 0.08)):
            results = closed_loop(ttft * rng.uniform(0.9, 1.1, 24), 2, prompts=12, t0=1000.0 + 100 * repeat)
            for turn, r in enumerate(results):
                r.turn = turn % 2
            results[0].cancelled, results[0].success = True, False
            run.add(server, "qa", "stream", 2, results, repeat=repeat, block=repeat,
                    monitor=monitor_rows(1000.0 + 100 * repeat, 3, running=lambda t: 2))
    run.add("vllm", "qa", "stream", 16, open_loop(4.0, 20, 0.05, t0=5000.0), rate=4.0, phase="sweep")
    run.add("basic", "qa", "stream", 8, None, status="failed", error="server died during the cell")
    with (run.path / "capacity.jsonl").open("w") as out:
        out.write(json.dumps(searched(8.3, 10.0, "vllm")) + "\n" + json.dumps(searched(2.1, 10.0, "basic")) + "\n")
    return run


@pytest.mark.slow
def test_save_and_load_give_the_same_report_and_the_same_files(tmp_path):
    run = every_section(tmp_path / "run")
    report = build_report(load_run(run.path), use_tokenizer=False)
    first = write_report(report, tmp_path / "built").parent
    loaded = Report.load(first / REPORT_JSON)
    assert loaded.to_builtins() == report.to_builtins()
    assert loaded.data is None and loaded.run.name == "run" and loaded.run.manifest["format_version"] == FORMAT_VERSION
    # typed, every section: rows with their intervals, ratios naming the rows they compare
    assert all(isinstance(r, Row) for r in loaded.rows + loaded.groups + loaded.turns)
    assert all(isinstance(r, Ratio) and r.top in loaded.groups and r.bottom in loaded.groups for r in loaded.ratios)
    assert [type(x) for x in (loaded.capacity[0], loaded.repeats[0], loaded.series[0], loaded.steady[0])] == [
        CapacityRow, RepeatRow, SeriesRow, SteadyRow]
    assert all(r.top in loaded.run.capacity for r in loaded.capacity_ratios) and loaded.capacity_ratios
    group = next(g for g in loaded.groups if g.point.server == "vllm" and g.point.load.closed)
    iv = group.interval("output_token_throughput")
    assert iv.covers == "across 2 repeats" and iv.method == "Student's t over repeats" and iv.n == 2
    assert iv.low < iv.value < iv.high and [e.block for e in group.estimates.repeats] == [0, 1]
    assert group.estimates.repeats[0] is loaded.rows[0].estimates  # a point's repeats are its cell rows
    # every file written again from the loaded report is the same, byte for byte
    second = write_report(loaded, tmp_path / "again").parent
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in second.iterdir()) and "report.html" in names and "repeats.csv" in names
    assert [n for n in names if (first / n).read_bytes() != (second / n).read_bytes()] == []
    assert main([str(first / REPORT_JSON), "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "summary.md").read_bytes() == (first / "summary.md").read_bytes()


def saved(tmp_path) -> tuple[ScriptedRun, Path]:
    run = ScriptedRun(tmp_path / "run")
    run.add("basic", "qa", "stream", 1, closed_loop([0.05] * 12, 1, prompts=12))
    write_report(build_report(load_run(run.path), use_tokenizer=False), run.path / "report")
    return run, run.path / "report" / REPORT_JSON


@pytest.mark.parametrize("version, message", [(FORMAT_VERSION + 1, f"format version {FORMAT_VERSION + 1} is newer "
                                               f"than this llmload reads ({FORMAT_VERSION}): update llmload"),
                                              (0, "report format version 0 is older than this llmload's"),
                                              ("two", "unknown format version 'two'")])
def test_another_format_version_is_one_line(tmp_path, capsys, version, message):
    run, path = saved(tmp_path)
    data = json.loads(path.read_text())
    data["format_version"] = version
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError, match=re.escape(message)):
        Report.load(path)
    assert main([str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}: ") and message in line
    assert saved_report(run.path) is None  # the folder's raw logs are there: it is rebuilt from them


def test_files_that_are_not_reports_are_one_line(tmp_path, capsys):
    _, path = saved(tmp_path)
    for text, message in (("{", "not a report: invalid JSON"), ('{"format": "x"}', "not an llmload report"),
                          (json.dumps({"format": "llmload-report", "format_version": FORMAT_VERSION}),
                           "not a valid report")):
        path.write_text(text)
        assert main([str(path)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    with pytest.raises(SystemExit) as stopped:
        main([str(path), "--baseline", "vllm"])
    assert stopped.value.code == 2 and "a saved report is written again as it was made" in capsys.readouterr().err


def test_run_json_and_the_raw_log_carry_the_version(tmp_path):
    run, _ = saved(tmp_path)
    assert read_manifest(run.path)["format_version"] == FORMAT_VERSION
    log = next(run.path.glob("basic/*_requests.jsonl"))
    assert all(json.loads(line)["format_version"] == FORMAT_VERSION for line in log.read_text().splitlines())
    lines = log.read_text().splitlines()
    newer = json.loads(lines[3])
    newer["format_version"] = FORMAT_VERSION + 1
    log.write_text("\n".join(lines[:3] + [json.dumps(newer)]) + "\n")
    with pytest.raises(ValueError, match=f":4: format version {FORMAT_VERSION + 1} is newer"):
        read_results(log)
    older = [json.loads(line) for line in lines]  # a log written before versions: no field, read as it is
    log.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "format_version"}) + "\n" for r in older))
    assert len(read_results(log)) == 12
    manifest = json.loads((run.path / "run.json").read_text())
    (run.path / "run.json").write_text(json.dumps({**manifest, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ReportError, match="run.json: format version .* is newer"):
        load_run(run.path)


def test_an_old_folder_or_a_stale_report_is_rebuilt_from_the_raw_logs(tmp_path):
    run, path = saved(tmp_path)
    assert saved_report(run.path) is not None
    path.unlink()  # a run folder from before report.json
    assert saved_report(run.path) is None
    write_report(build_report(load_run(run.path), use_tokenizer=False), run.path / "report")
    run.add("basic", "qa", "stream", 2, closed_loop([0.05] * 12, 2, prompts=12))  # the run went on
    assert saved_report(run.path) is None


def two_runs(tmp_path, repeats: int = 1) -> tuple:
    folders = []
    for name, ttft in (("a", 0.05), ("b", 0.07)):
        run = ScriptedRun(tmp_path / name)
        rng = np.random.default_rng(len(name))
        for repeat in range(repeats):
            for users in (1, 4):
                run.add("basic", "qa", "stream", users, closed_loop(ttft * rng.uniform(0.9, 1.1, 16), users,
                                                                    prompts=16, t0=1000.0 + 100 * repeat),
                        repeat=repeat)
        folders.append(run.path)
    return folders


def test_compare_reads_the_typed_reports_and_gives_what_the_raw_logs_give(tmp_path, monkeypatch):
    a, b = two_runs(tmp_path)
    raw = compare_runs(a, b, tmp_path / "raw", use_calibration=False).parent  # no report.json yet: the raw logs
    for folder in (a, b):
        write_report(build_report(load_run(folder), use_tokenizer=False), folder / "report")

    def no_rows(*args, **kwargs):
        raise AssertionError("rows computed again: the typed report was not used")

    monkeypatch.setattr(compare_module, "run_rows", no_rows)
    typed = compare_runs(a, b, tmp_path / "typed", use_calibration=False).parent
    files = sorted(p.name for p in raw.iterdir())
    assert files == ["compare.csv", "compare.md", "compare_ratios.png"]
    assert [n for n in files if (raw / n).read_bytes() != (typed / n).read_bytes()] == []
    from_json = compare_runs(a / "report" / REPORT_JSON, b / "report" / REPORT_JSON, tmp_path / "json",
                             use_calibration=False).parent
    assert (from_json / "compare.csv").read_bytes() == (raw / "compare.csv").read_bytes()


def test_report_files_alone_compare_by_their_repeats(tmp_path):
    a, b = two_runs(tmp_path, repeats=2)
    with_logs = compare_runs(a, b, tmp_path / "logs", use_calibration=False).parent
    for folder in (a, b):
        write_report(build_report(load_run(folder), use_tokenizer=False), folder / "report")
        shutil.copy(folder / "report" / REPORT_JSON, tmp_path / f"{folder.name}.json")
        shutil.rmtree(folder)  # the run folders are gone: what the repeats give is compared, the rest is listed
    md = compare_runs(tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out", use_calibration=False).read_text()
    rows = {(r["concurrency"], r["metric"]): r for r in read_csv(tmp_path / "out" / "compare.csv")}
    before = {(r["concurrency"], r["metric"]): r for r in read_csv(with_logs / "compare.csv")}
    assert rows and set(rows) < set(before)
    assert all(rows[k] == before[k] and rows[k]["method"] == "repeats" for k in rows)
    assert "has no raw logs at hand" in md.split("## Not compared", 1)[1]
