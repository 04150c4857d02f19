"""The report's cost and energy section on a real mock run: the price per hour, a capacity search, and a RAPL
counter of known power (a powercap folder of the same layout whose package counter a thread advances)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from report_helpers import REPO, ScriptedRun, read_csv, run_module, stream_result

pytestmark = pytest.mark.integration

WATTS = 20.0
PRICE = 2.5


@contextmanager
def rapl_at(root: Path, watts: float):
    """A powercap folder with one package zone whose counter rises by ``watts`` (µJ per µs), wrapping at 1 kJ;
    yields ``(root, gaps)``: the seconds between the counter's writes (a reading is as stale as its gap)."""
    zone = root / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    wrap_uj = 1_000_000_000  # 1 kJ: a 20 W counter wraps every 50 s (the run is shorter; the unit test wraps it)
    (zone / "max_energy_range_uj").write_text(f"{wrap_uj}\n")
    stop = threading.Event()
    started = time.time()
    gaps: list[float] = []
    last = [started]

    def write() -> None:
        now = time.time()
        tmp = zone / "energy_uj.tmp"
        tmp.write_text(f"{int((now - started) * watts * 1e6) % wrap_uj}\n")
        os.replace(tmp, zone / "energy_uj")
        gaps.append(time.time() - last[0])  # since the last value: how stale a reading just before this could be
        last[0] = now

    write()

    def tick() -> None:
        while not stop.wait(0.02):
            write()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield root, gaps
    finally:
        stop.set()
        thread.join(5)


@pytest.mark.slow
@pytest.mark.serial  # the fake counter's writer thread must run on time: at load 4 it slept 0.36 s once, and the
# monitor's slope over its first samples, carried back to a cell's start, read 61 J for 27
def test_cost_and_energy_of_a_real_mock_run(tmp_path, prompt_dir16):
    run_dir = tmp_path / "run"
    with rapl_at(tmp_path / "powercap", WATTS) as (root, gaps):
        proc = subprocess.run([sys.executable, "-m", "llmload.runner", "--servers", "mock", "--tasks", "qa", "--modes",
                               "stream", "--concurrency", "4", "--requests", "32", "--max-tokens", "8",
                               "--mock-ttft-ms", "50", "--data-dir", str(prompt_dir16), "--out", str(run_dir),
                               "--price-per-hour", f"mock={PRICE}", "--find-capacity", "--slo", "e2e=2000",
                               "--capacity-steps", "2", "--capacity-looks", "1", "--slo-target", "80", "--pool", "4",
                               "--repeat", "1"],
                              cwd=REPO, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "LLMLOAD_POWERCAP": str(root)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = run_dir / "report"
    summary = {(r["phase"], r["rate"]): r for r in read_csv(report / "summary.csv")}
    costs = read_csv(report / "cost.csv")
    (search,) = [json.loads(line) for line in (run_dir / "capacity.jsonl").read_text().splitlines()]
    # the matrix cell, the saturation run and each capacity step the search took (one or both of --capacity-steps 2)
    assert len(costs) == len(summary) == 2 + len(search["steps"]) and len(search["steps"]) in (1, 2)
    for row in costs:
        whole = summary[(row["phase"], row["rate"])]
        tok_s, req_s = float(whole["output_token_throughput"]), float(whole["request_throughput"])
        assert float(row["price_per_hour"]) == PRICE
        assert float(row["usd_per_million_output_tokens"]) == pytest.approx(PRICE / 3600 / tok_s * 1e6)
        assert float(row["usd_per_thousand_requests"]) == pytest.approx(PRICE / 3600 / req_s * 1e3)
        # the interval of the throughput, carried through: a higher throughput is a lower cost
        low, high = float(row["usd_per_million_output_tokens_ci_low"]), float(row["usd_per_million_output_tokens_ci_high"])
        assert low == pytest.approx(PRICE / 3600 / float(whole["output_token_throughput_ci_high"]) * 1e6)
        assert low <= float(row["usd_per_million_output_tokens"]) <= high
        # energy: 20 W over the cell's wall time, per token and per request
        energy, duration = float(row["energy_j"]), float(whole["duration_s"])
        # each end read from a counter as stale as the longest gap between its writes (a busy machine delays the
        # writer thread: 105 ms once)
        stale_j = 2 * WATTS * max(gaps)
        assert energy == pytest.approx(WATTS * duration, rel=0.1, abs=0.3 + stale_j), (energy, duration, max(gaps))
        assert float(row["j_per_output_token"]) == pytest.approx(energy / float(whole["total_output_tokens"]))
        assert float(row["j_per_request"]) == pytest.approx(energy / (int(whole["requests"]) - int(whole["failures"])))
        assert row["energy_source"] == "RAPL (CPU package)"
    (at_capacity,) = read_csv(report / "capacity_cost.csv")
    assert search["capacity_rps"] is not None and float(at_capacity["capacity_rps"]) == search["capacity_rps"]
    held = summary[("capacity", f"{search['bracket'][0]:g}")]  # the highest rate that held: the one measured
    assert float(at_capacity["usd_per_million_output_tokens"]) == pytest.approx(
        PRICE / 3600 / float(held["output_token_throughput"]) * 1e6)
    text = (report / "summary.md").read_text()
    section = text.split("## Cost and energy", 1)[1]
    assert "$ per 1M output tokens" in section and "At the capacity each search found" in section
    assert "J per output token" in section and "not available" not in section


def test_without_a_price_or_a_counter_the_section_says_so_once(tmp_path):
    run = ScriptedRun(tmp_path / "run")
    for users in (1, 4):
        run.add("mock", "qa", "stream", users, [stream_result(i, 1000.0 + i, 0.05) for i in range(12)])
    proc = run_module("reports.merge", run.path, "--no-tokenizer")
    assert proc.returncode == 0, proc.stderr
    text = (run.path / "report" / "summary.md").read_text()
    assert text.count("Energy per token: not available") == 1
    assert "No price per hour given" in text
    rows = read_csv(run.path / "report" / "cost.csv")
    assert len(rows) == 2 and all(r["energy_j"] == "" and r["usd_per_million_output_tokens"] == "" for r in rows)
