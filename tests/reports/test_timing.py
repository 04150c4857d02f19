"""Where the time goes: the report's section and ``llmload explain`` on scripted runs with known parts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmload.core.spans import SpanRecord
from reports.explain import main as explain
from reports.merge import build_report, write_report
from reports.report import REPORT_JSON, Report
from reports.run import load_run
from reports.timing import SplitRow
from report_helpers import ScriptedRun, closed_loop, read_csv

pytestmark = pytest.mark.unit

REQUESTS = 24


def timed_loop(concurrency: int, queue_ms: float, prefill_ms: float, residual_ms: float = 2.0,
               frontend_ms: float = 0.0, t0: float = 1000.0, seed: int = 0, timing: bool = True):
    """A closed loop whose server timed every request: TTFT = residual + frontend + queue + prefill (each with a
    little noise), then 8 tokens 10 ms apart (decode 70 ms, tail 0); the frontend only in the span (vLLM's)."""
    rng = np.random.default_rng(seed)
    queue = queue_ms * rng.uniform(0.8, 1.2, REQUESTS) / 1000.0
    prefill = prefill_ms * rng.uniform(0.95, 1.05, REQUESTS) / 1000.0
    results = closed_loop(residual_ms / 1000.0 + frontend_ms / 1000.0 + queue + prefill, concurrency, t0=t0)
    for r, q, p in zip(results, queue, prefill):
        if timing:
            r.server_timing = {"queue_time_ms": float(q) * 1000.0, "time_to_first_token_ms": float(p) * 1000.0,
                               "generation_time_ms": 70.0}
    return results, queue, prefill


def span(r, frontend_ms: float, queue_s: float, prefill_s: float) -> SpanRecord:
    queue_s, prefill_s = float(queue_s), float(prefill_s)
    timing = {"gen_ai.latency.time_in_queue": queue_s, "gen_ai.latency.time_in_model_prefill": prefill_s,
              "gen_ai.latency.time_to_first_token": frontend_ms / 1000.0 + queue_s + prefill_s}
    return SpanRecord(r.request_id, "ab" * 8, r.span_id or "cd" * 8, "llm_request", "server", 1, 2, timing,
                      service_name="vllm")


@pytest.fixture
def run(tmp_path) -> ScriptedRun:
    """vllm at 1 and 4 users (its queue grows from 1 to 100 ms, its prefill from 40 to 45 ms; spans at 1 user, one
    missing, two results sharing an id), a server without timing, one with malformed timing, one whose parts
    exceed the client's TTFT."""
    run = ScriptedRun(tmp_path / "run")
    low, q1, p1 = timed_loop(1, 1.0, 40.0, frontend_ms=3.0)
    low[5].request_id = low[6].request_id = "dup"
    cell = run.add("vllm", "qa", "stream", 1, low)
    spans = [span(r, 3.0, q, p) for r, q, p in zip(low, q1, p1) if r is not low[9] and r is not low[6]]
    cell.files(run.path).spans.write_text("".join(s.to_json() + "\n" for s in spans))
    high, _, _ = timed_loop(4, 100.0, 45.0, t0=2000.0, seed=1)
    run.add("vllm", "qa", "stream", 4, high)
    run.add("basic", "qa", "stream", 1, timed_loop(1, 0.0, 40.0, t0=3000.0, timing=False)[0])
    broken, _, _ = timed_loop(1, 0.0, 40.0, t0=4000.0, timing=False)
    for r in broken[:3]:
        r.flags.append("server_timing_malformed")
    run.add("broken", "qa", "stream", 1, broken)
    behind, _, _ = timed_loop(1, 10.0, 40.0, residual_ms=-5.0, t0=5000.0)
    for r in behind:  # sync: the body 1 ms after the last token, E2E = -5 + queue + prefill + decode + 1 ms
        r.mode, r.token_offsets = "sync", []
    run.add("behind", "qa", "sync", 1, behind)
    return run


def test_each_part_with_its_interval_share_counts_and_the_growth_with_load(run, tmp_path):
    report = build_report(load_run(run.path), use_tokenizer=False)
    rows = {r.point.label: r for r in report.time_split}
    low, high = rows["vllm qa stream c1"], rows["vllm qa stream c4"]
    # the span join: 21 joined, one request without a span, the duplicated id joined to nothing
    assert low.spans == {"joined": 21, "requests_without_span": 1, "spans_without_request": 0, "duplicate_ids": 1}
    assert high.spans is None and (low.timed, low.requests) == (REQUESTS, REQUESTS)
    assert low.part("frontend").n == 21 and low.part("frontend").mean == pytest.approx(0.003)
    # the residual: 2 ms, and 5 ms (2 + the frontend) where no span gave the frontend
    assert low.residual.mean == pytest.approx((21 * 0.002 + 3 * 0.005) / REQUESTS)
    # each part's mean and interval are the report's own figures; its share a paired ratio of means
    results = [r for c in load_run(run.path).cells if c.cell.concurrency == 4 and c.cell.server == "vllm"
               for r in c.results]
    queue = np.array([r.server_timing["queue_time_ms"] for r in results]) / 1000.0
    ttft = np.array([r.token_offsets[0] for r in results])
    q = high.part("queue")
    assert q.mean == pytest.approx(queue.mean()) and q.interval.low < q.mean < q.interval.high
    assert q.share_ttft.value == pytest.approx(queue.mean() / ttft.mean())
    assert q.share_ttft.low < q.share_ttft.value < q.share_ttft.high and q.share_ttft.n == REQUESTS
    assert high.part("decode").share_ttft is None and high.part("decode").mean == pytest.approx(0.070)
    assert high.part("tail").mean == pytest.approx(0.0, abs=1e-9)
    # a server without timing, one with malformed timing, one whose parts exceed its latency
    assert rows["basic qa stream c1"].timed == 0 and rows["broken qa stream c1"].malformed == 3
    behind = rows["behind qa sync c1"]
    assert behind.residual.name == "e2e_residual" and behind.residual.negative == REQUESTS
    assert behind.residual.mean == pytest.approx(-0.004)  # kept as measured, not clipped
    text = "\n".join(write_report(report, tmp_path / "out").read_text().splitlines())
    section = text[text.index("## Where the time goes"):]
    section = section[:section.index("\n## ", 5)]
    assert section.count("basic: no per-request timing from the server") == 1  # said once
    assert "broken: no per-request timing from the server (its metrics object was malformed in 3 requests" in section
    assert "Flagged: client/network below 0 (" in section and f"behind qa sync c1: {REQUESTS} of {REQUESTS}" in section
    grew = (high.part("queue").mean - low.part("queue").mean) * 1000.0
    total = (high.total - low.total) * 1000.0
    assert (f"qa stream: at 4 users vllm's TTFT is {q.share_ttft.value * 100:.0f} % "
            f"[{q.share_ttft.low * 100:.0f}, {q.share_ttft.high * 100:.0f}] queue (queue grew {grew:.0f} ms of "
            f"TTFT's {total:.0f} ms growth from 1 to 4 users)") in section
    # the CSV, the PNG and the HTML section
    csv_rows = {(r["server"], r["concurrency"]): r for r in read_csv(tmp_path / "out" / "time_split.csv")}
    assert float(csv_rows[("vllm", "4")]["queue_mean_ms"]) == pytest.approx(queue.mean() * 1000.0)
    assert csv_rows[("vllm", "1")]["spans_duplicate_ids"] == "1"
    assert (tmp_path / "out" / "time_split.png").stat().st_size > 10_000
    page = (tmp_path / "out" / "report.html").read_text()
    assert 'id="where-the-time-goes"' in page and 'data-chart="time-split-qa-stream"' in page
    # the typed section survives report.json
    loaded = Report.load(tmp_path / "out" / REPORT_JSON)
    assert all(isinstance(r, SplitRow) for r in loaded.time_split)
    assert loaded.to_builtins()["time_split"] == report.to_builtins()["time_split"]
    write_report(loaded, tmp_path / "again")
    for name in ("summary.md", "time_split.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes()


def test_explain_prints_the_split_and_names_the_part_that_grew(run, tmp_path, capsys):
    assert explain([str(run.path)]) == 0  # no report yet: made from the raw logs, nothing written
    out = capsys.readouterr().out
    assert not (run.path / "report").exists() and "(raw logs; nothing written)" in out
    assert "vllm qa stream: TTFT = client/network + frontend + queue + prefill" in out
    assert "at 4 users vllm's TTFT is" in out and "queue (queue grew" in out
    (breakdown,) = [line for line in out.splitlines() if line.startswith("  qa stream: vllm TTFT grew +")]
    assert "queue +99 ms (9" in breakdown and "prefill +" in breakdown, breakdown  # 100 - 1 ms: most of the growth
    assert out.count("basic: no per-request timing from the server") == 1
    lines = [line for line in out.splitlines() if line.startswith("| c4")]
    assert len(lines) == 1 and "24/24" in lines[0]
    write_report(build_report(load_run(run.path), use_tokenizer=False), run.path / "report")
    assert explain([str(run.path / "report" / REPORT_JSON)]) == 0  # a saved report, the same text
    assert capsys.readouterr().out.split("\n", 1)[1] == out.split("\n", 1)[1]


def test_explain_bad_input_is_one_line(tmp_path, capsys, run):
    empty = tmp_path / "empty"
    empty.mkdir()
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    write_report(build_report(load_run(run.path), use_tokenizer=False), tmp_path / "old")
    old = tmp_path / "old" / REPORT_JSON
    data = json.loads(old.read_text())
    data.pop("time_split")  # a report made before the section
    old.write_text(json.dumps(data))
    for argv, says in (([str(tmp_path / "missing")], "no such run folder or report file"),
                       ([str(empty)], "empty"), ([str(not_json)], "invalid JSON"),
                       ([str(old)], "made before the report split latencies"), ([], "the following arguments")):
        assert exit_code(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and says in err, err


def exit_code(argv: list[str]) -> int:
    """``llmload explain``'s exit code, whether it returns it or its parser exits with it."""
    try:
        return explain(argv)
    except SystemExit as exc:
        return exc.code
