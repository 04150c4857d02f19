"""The capacity search benchmark: its summary on scripted searches, and end to end on the known server (tiny
settings, this checkout as both codes)."""

from __future__ import annotations

import json

import pytest

from benchmarks.capacity_search import Search, build_parser, main, summary
from llmload.core.paths import REPO_ROOT


@pytest.mark.unit
def test_the_summary_pairs_the_codes_by_round():
    args = build_parser().parse_args([])
    searches = [Search(1, "known", "before", 30.0, requests=400, capacity=20.4, low=19.7, high=21.0),
                Search(1, "known", "after", 10.0, requests=150, capacity=20.2, low=19.5, high=20.6),
                Search(2, "known", "before", 40.0, requests=400, capacity=20.5, low=20.1, high=21.1),
                Search(2, "known", "after", 12.0, requests=150, capacity=20.2, low=19.5, high=20.6),
                Search(3, "known", "after", error="the runner exited with 1")]
    table = summary(searches, args)
    assert "| known    | 35.0 -> 11.0 " in table and "400.0 -> 150.0" in table
    assert "0.31 [" in table  # (10 + 12) / (30 + 40), Student's t over the rounds' log ratios
    assert "1/2 -> 2/2" in table  # round 2's before interval [20.1, 21.1] misses 20; the failed search is left out
    assert searches[0].half_width_pct == pytest.approx(100 * 1.3 / 40.7)


@pytest.mark.integration
@pytest.mark.slow
def test_both_codes_search_the_known_server_and_compare_as_ratios(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["--before", str(REPO_ROOT), "--rounds", "1", "--service-ms", "100", "--slo", "e2e=300",
                 "--slo-target", "50", "--requests", "20", "--pool", "20", "--capacity-steps", "2",
                 "--capacity-looks", "2", "--ci", "20", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    searches = json.loads((out / "searches.json").read_text())
    assert sorted(s["code"] for s in searches) == ["after", "before"]
    for s in searches:
        assert s["error"] == "" and s["seconds"] > 0 and s["cells"] >= 2 and s["requests"] >= 20, s
        assert (out / "round1" / f"known-{s['code']}" / "capacity.jsonl").is_file()
    assert "time after/before" in printed.out and "--capacity-ci 20" in printed.out
    assert main(["--before", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --before {tmp_path} is not a checkout of this suite (no "
                                               "llmload/runner/capacity.py)")
