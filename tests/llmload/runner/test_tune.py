"""``llmload tune`` on mock servers of known capacity: the ranking and its significance, a configuration that
fails to start, an interrupt after the first finished run and the resume that does not run it again."""

from __future__ import annotations

import json
import signal

import pytest

from llmload.core.runfiles import read_cells
from prompt_sets import make_data
from reports.tune import TuneReport
from runner_helpers import descendants, run_runner, send, start_runner, stop_leftovers, wait_for

pytestmark = pytest.mark.integration

#: The mock's service time: 80 ms to the first token, one more 20 ms later (--max-tokens 2): 100 ms a request, so
#: K slots hold K / 0.1 requests/s under constant arrivals (docs/engines.md).
SERVICE_S = 0.1


def states(folder) -> dict[str, str]:
    path = folder / "tune.json"
    try:
        return {f"{r['config']} b{r['block']}": r["state"] for r in json.loads(path.read_text())["runs"]}
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
def test_a_tune_ranks_known_capacities_survives_a_failed_start_and_resumes(tmp_path):
    data = make_data(tmp_path / "data")
    folder = tmp_path / "tune"
    args = ("tune", "--servers", "mock,exits-at-start", "--grid", "mock-slots=1,3", "--tasks", "qa", "--modes",
            "stream", "--requests", "40", "--max-tokens", "2", "--mock-ttft-ms", "80", "--mock-itl-ms", "20",
            "--slo", "e2e=400", "--slo-target", "75", "--capacity-steps", "4", "--capacity-looks", "2", "--arrival",
            "constant", "--max-lag", "100", "--order-seed", "0", "--data-dir", str(data), "--out", str(folder))
    tune = start_runner(*args, fakes=True)
    started = []
    try:
        # interrupt once the first configuration is measured: SIGINT to the tune's process group
        assert wait_for(lambda: "done" in states(folder).values(), timeout=240), (
            tune.communicate(timeout=30) if tune.poll() is not None else states(folder))
        started = descendants(tune.pid)
        send(tune.pid, signal.SIGINT, group=True)
        out, err = tune.communicate(timeout=120)
    finally:
        if tune.poll() is None:
            tune.kill()
            tune.wait()
        leftovers = stop_leftovers(started + descendants(tune.pid))
    assert tune.returncode == 130, out + err
    assert leftovers == []
    assert "Traceback" not in err and f"llmload tune --resume {folder}" in err, err
    first = states(folder)
    (done,) = [run for run, state in first.items() if state == "done"]
    # seed 0 orders the runs exits-at-start, mock[ms=1], mock[ms=3]: the signal came as the last one started
    assert first["exits-at-start b1"] == "failed" and done == "mock[ms=1] b1", first
    assert first["mock[ms=3] b1"] in ("interrupted", "pending"), first
    info = json.loads((folder / "tune.json").read_text())
    done_dir = folder / next(r["dir"] for r in info["runs"] if f"{r['config']} b{r['block']}" == done)
    kept = (done_dir / "cells.jsonl").read_bytes()
    # an interrupted run has a folder unless the signal came before its runner made one (its server starting)
    interrupted = {r["dir"]: (folder / r["dir"]).is_dir() for r in info["runs"] if r["state"] == "interrupted"}

    proc = run_runner("tune", "--resume", str(folder), fakes=True, merged=True, timeout=600)
    # exit 1: a configuration failed (its server did not start), the others measured and reported
    assert proc.returncode == 1, proc.stdout
    assert f"{done.replace(' b', ' block ')}: done before, kept" in proc.stdout
    both = out + proc.stdout  # the failed start: reported where it happened, before or after the interrupt
    assert "exits-at-start block 1: FAILED: server failed to start: exits-at-start exited with code 1" in both
    assert "the tune goes on with the others" in both
    assert "exits-at-start block 1: failed before, kept" in proc.stdout
    assert (done_dir / "cells.jsonl").read_bytes() == kept  # not run again
    for run, had_folder in interrupted.items():  # run again in a fresh folder, the interrupted one kept beside it
        assert (folder / f"{run}.interrupted-1").is_dir() == had_folder and (folder / run / "cells.jsonl").is_file()
    assert states(folder) == {"mock[ms=1] b1": "done", "mock[ms=3] b1": "done", "exits-at-start b1": "failed"}
    for config in ("mock-ms=1", "mock-ms=3"):
        cells = read_cells(folder / "runs" / config / "b1")
        assert cells and all(c.status == "ok" for c in cells) and cells[0].phase == "capacity"

    report = TuneReport.load(folder / "report" / "report.json")
    ranking = [(s.rank, s.config) for s in report.ranking]
    assert ranking == [(1, "mock[ms=3]"), (2, "mock[ms=1]"), (None, "exits-at-start")], ranking
    assert report.ranking[2].note.startswith("failed: server failed to start")
    capacity = {s.config: s.capacity for s in report.ranking}
    for config, known in (("mock[ms=1]", 1 / SERVICE_S), ("mock[ms=3]", 3 / SERVICE_S)):
        assert 0.7 * known <= capacity[config].value <= 1.3 * known, (config, capacity[config])
    (c,) = report.comparisons
    assert (c.top, c.bottom, c.method) == ("mock[ms=3]", "mock[ms=1]", "the two searches' intervals, 97.5 % each")
    assert c.significant and c.p_holm == c.p_value < 0.05 and c.ratio.low > 1.5, c
    (best,) = report.best
    assert best.config == "mock[ms=3]" and best.next == "mock[ms=1]" and best.significant
    assert f"best: {best.sentence}" in proc.stdout and f"tune report: {folder / 'report' / 'tune.md'}" in proc.stdout
    top = next(p for p in report.pareto if p.config == "mock[ms=3]")
    assert top.front_per_user and top.front_latency  # the most output tok/s: dominated by none
    assert len(report.pareto) == 2 and all(d.significant is None for d in report.dominations)  # one block
    curve = [p for p in report.curves if p.config == "mock[ms=3]"]
    assert sum(p.at_capacity for p in curve) == 1 and {p.decision for p in curve} >= {"held", None}
    assert (folder / "report" / "tune.html").is_file()
    assert "mock[ms=3]" in (folder / "report" / "tune.md").read_text()
