"""The next cell's Locust, started beside the last one: it runs the next cell, a dead one is replaced, none is left."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmload.core.rawlog import read_results
from llmload.core.runfiles import Cell, read_cells
from llmload.runner import cell as cell_module
from llmload.runner.cell import LOCUST, SPARE, SPARE_EXIT_S, CellRunner, LoadOptions
from llmload.targets import RunningTarget, get_kind
from prompt_sets import make_data

pytestmark = pytest.mark.integration

REQUESTS = 6


@pytest.fixture
def runner_and_target(tmp_path, server_factory, monkeypatch):
    """A cell runner against the mock, each process it starts recorded as what it runs (locust or spare)."""
    url = server_factory("mock", "--mock-ttft-ms", "5", "--mock-itl-ms", "1")
    started: list[str] = []
    popen = subprocess.Popen

    def recorded(argv, *args, **kwargs):
        if argv == SPARE or argv[:len(LOCUST)] == LOCUST:  # not the resource monitor's process
            started.append("spare" if argv == SPARE else "locust")
        return popen(argv, *args, **kwargs)

    monkeypatch.setattr(cell_module.subprocess, "Popen", recorded)
    data = make_data(tmp_path / "data", n=REQUESTS)
    options = LoadOptions(api="chat", requests=REQUESTS, max_tokens=4, warmup=0, arrival="constant", burstiness=None,
                          seed=0, slo=None, cell_timeout=60.0)
    runner = CellRunner(tmp_path / "run", options, {"qa": data / "qa.jsonl"})
    target = RunningTarget("mock", get_kind("mock"), url, process=server_factory.processes[-1])
    yield runner, target, started
    runner.close()


def run_cell(runner: CellRunner, target: RunningTarget, name: str, last: bool = False):
    cell = Cell("mock", "qa", "stream", 2, f"mock/{name}")
    result = runner.run(cell, target, last=last)
    assert cell.status == "ok", (cell.error, cell.files(runner.run_dir).locust_log.read_text())
    files = cell.files(runner.run_dir)
    assert len(read_results(files.raw_log)) == REQUESTS == len(result.results)
    assert "Aggregated" in files.locust_log.read_text()  # Locust's own summary, in the cell's log
    return cell


def test_each_cell_after_the_first_runs_in_the_locust_started_during_the_one_before(runner_and_target):
    runner, target, started = runner_and_target
    run_cell(runner, target, "first")
    spare = runner._spare
    assert started == ["locust", "spare"] and spare is not None and spare.poll() is None  # waiting for its cell
    second = run_cell(runner, target, "second")
    assert started == ["locust", "spare", "spare"]  # no new Locust: the spare ran it, and the next one waits
    assert spare.returncode == second.exit_code == 0
    spare = runner._spare
    run_cell(runner, target, "third", last=True)
    assert started == ["locust", "spare", "spare"] and runner._spare is None  # the last cell starts no spare
    assert spare.returncode == 0
    assert [(c.prefix, c.status) for c in read_cells(runner.run_dir)] == [
        ("mock/first", "ok"), ("mock/second", "ok"), ("mock/third", "ok")]


def test_a_spare_that_died_is_replaced_and_the_last_one_ends_when_closed(runner_and_target):
    runner, target, started = runner_and_target
    runner.start_spare()  # as the runner does while its servers start
    runner.start_spare()  # one is waiting: no second
    run_cell(runner, target, "first")
    assert started == ["spare", "spare"]  # the first cell too ran in a spare
    runner._spare.kill()
    runner._spare.wait(SPARE_EXIT_S)
    run_cell(runner, target, "second")
    assert started == ["spare", "spare", "locust", "spare"]
    waiting = runner._spare
    runner.close()
    assert waiting.returncode == 0 and runner._spare is None  # its input closed: it ran nothing and exited


def test_the_spares_output_before_its_cell_reaches_the_cells_log(tmp_path):
    """What a spare prints while it waits (here Python's import times) comes first in the log its cell names."""
    log = tmp_path / "cell.log"
    with (tmp_path / "early").open("w+b") as early:
        proc = subprocess.Popen([sys.executable, "-X", "importtime", *SPARE[1:]], stdin=subprocess.PIPE,
                                stdout=early, stderr=subprocess.STDOUT)
        proc.communicate(json.dumps({"argv": ["--version"], "log": str(log)}).encode() + b"\n", timeout=60)
    text = log.read_text()
    assert proc.returncode == 0 and "import time:" in text and "locust.main" in text
    assert text.rstrip().splitlines()[-1].startswith("locust 2.")  # then Locust's own output: --version
