"""``llmload tune`` end to end on the embedded model: basic-batched at max-num-seqs 4, 16 and 32 and vLLM at 16
(one setting: a vLLM start costs about four of the basic server's), each capacity-searched; the HTML report opened
in headless Chromium shows the ranking and the Pareto front (the e2e tier: its own file, so that pytest-xdist starts
it first, alone).

What is checked is the tune's plumbing (flags reaching each server, the search, the ranking, the page), not vLLM's
own process layout: vLLM runs eager and in two processes (the API server and the engine, with the executor in the
engine's process: ``--distributed-executor-backend uni``), which start with about 60 % of the CPU time of its
default three (docs/testing.md). test_runner_vllm.py runs vLLM as deployed."""

from __future__ import annotations

import json
import re

import pytest

from browser import NEEDS_BROWSER, read_offline
from prompt_sets import make_data
from reports.tune import TUNE_HTML, TuneReport, capacity_text
from runner_helpers import run_runner

pytestmark = [pytest.mark.e2e, *NEEDS_BROWSER]

#: What the page shows: per chart its SVGs and markers, every table's cells, the sections.
READ_PAGE = """() => {
  const charts = {};
  document.querySelectorAll('div.chart').forEach(d => {
    charts[d.dataset.chart] = {svgs: d.querySelectorAll('svg.main-svg').length,
                               points: d.querySelectorAll('.scatterlayer .trace .points path.point').length,
                               legend: Array.from(d.querySelectorAll('.legend .legendtext')).map(t => t.textContent)};
  });
  const tables = {};
  document.querySelectorAll('table[data-table]').forEach(t => {
    tables[t.dataset.table] = Array.from(t.querySelectorAll('tr')).map(
      r => Array.from(r.children).map(c => c.textContent));
  });
  return {charts, tables, sections: Array.from(document.querySelectorAll('h2')).map(h => h.textContent)};
}"""


def test_a_tune_of_basic_batched_and_vllm_ranks_them_in_a_page(tmp_path, default_model):
    from server.vllm_launcher import vllm_installed  # only this test needs to know

    if not vllm_installed():
        pytest.skip("vLLM is not installed (LLMLOAD_VLLM=none)")
    folder = tmp_path / "tune"
    # few requests, one look per step and two steps: a tiny search per configuration; vLLM started once, eager,
    # its executor in its engine's process
    proc = run_runner("tune", "--servers", "basic-batched,vllm", "--grid", "max-num-seqs=4,16,32",
                      "--vllm-args-set=--max-num-seqs 16",
                      "--vllm-args=--enforce-eager --distributed-executor-backend uni", "--vllm-timeout", "900",
                      "--tasks", "qa", "--modes", "stream", "--requests", "30", "--max-tokens", "2", "--slo",
                      "e2e=5000", "--slo-target", "50", "--capacity-steps", "2", "--capacity-looks", "1",
                      "--data-dir", str(make_data(tmp_path / "data")),
                      "--out", str(folder), fakes=True, merged=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:]
    names = ["basic-batched[mns=4]", "basic-batched[mns=16]", "basic-batched[mns=32]", "vllm[mns=16]"]
    info = json.loads((folder / "tune.json").read_text())
    assert [c["name"] for c in info["configurations"]] == names
    assert sorted(r["config"] for r in info["runs"]) == sorted(names) and {r["state"] for r in info["runs"]} == {"done"}
    log = (folder / "runs" / "vllm-mns=16" / "b1" / "vllm[mns=16]" / "server.log").read_text()
    # the configuration's flags reached vLLM, after --vllm-args
    assert re.search(r"max_num_seqs'?[=:] ?16\b", log) and "enforce_eager=True" in log, log[-2000:]
    report = TuneReport.load(folder / "report" / "report.json")
    assert {s.config for s in report.ranking} == set(names)
    ranked = [s for s in report.ranking if s.rank is not None]
    assert len(ranked) >= 2, [(s.config, s.note) for s in report.ranking]
    assert report.best and report.best[0].config == ranked[0].config
    assert f"best: {report.best[0].sentence}" in proc.stdout

    shown, errors, outside = read_offline(folder / "report" / TUNE_HTML, READ_PAGE)
    assert errors == [] and outside == [], (errors, outside)
    assert shown["sections"][:3] == ["Best configuration", "Ranking", "Pareto front"], shown["sections"]
    # the ranking table: every configuration, the ranked ones in the report's order with their capacity
    table = shown["tables"]["ranking-qa-stream"]
    header, body = table[0], table[1:]
    assert [row[1] for row in body] == [s.config for s in report.ranking]
    for row, standing in zip(body, report.ranking):
        assert row[header.index("capacity req/s [95 %]")] == capacity_text(standing.capacity)
        assert row[0] == (str(standing.rank) if standing.rank else "-")
    # the Pareto front: each configuration at its capacity in both panels, the front drawn as a line
    pareto = shown["charts"]["pareto-qa-stream"]
    assert pareto["svgs"] >= 1 and pareto["points"] == 2 * len(report.pareto), pareto
    assert "Pareto front" in pareto["legend"] and {p.config for p in report.pareto} <= set(pareto["legend"])
    assert any(p.front_per_user for p in report.pareto)
    assert shown["charts"]["curves-qa-stream"]["points"] > 0
