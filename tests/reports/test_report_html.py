"""report.html in a real browser: headless Chromium (Playwright) with the network blocked draws every plotly chart
with its data points, and the tables hold the run's figures as summary.csv and ratios.csv have them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from browser import NEEDS_BROWSER, read_offline
from reports.format import number, shown, title
from reports.html import REPORT_HTML, RUN_SECTIONS
from reports.merge import merge_run
from reports.report import REPORT_JSON, Report
from report_helpers import ScriptedRun, closed_loop, read_csv, searched

pytestmark = [pytest.mark.e2e, *NEEDS_BROWSER]

LEVELS = (1, 2, 4)

#: What the page shows, read in the page: per chart its SVGs, markers and error bars; every table's cells.
READ_PAGE = """() => {
  const charts = {};
  document.querySelectorAll('div.chart').forEach(d => {
    charts[d.dataset.chart] = {svgs: d.querySelectorAll('svg.main-svg').length,
                               points: d.querySelectorAll('.scatterlayer .trace .points path.point').length,
                               bars: d.querySelectorAll('.errorbars path.xerror, .errorbars path.yerror').length};
  });
  const tables = {};
  document.querySelectorAll('table[data-table]').forEach(t => {
    tables[t.dataset.table] = Array.from(t.querySelectorAll('tr')).map(
      r => Array.from(r.children).map(c => c.textContent));
  });
  return {charts, tables, plotly: typeof window.Plotly, sections: Array.from(document.querySelectorAll('h2'))
          .map(h => h.textContent)};
}"""


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """A scripted run of two servers (vllm the baseline, TTFT 50 ms; basic 80 ms) at 1, 2 and 4 users, 40 requests
    each, and a capacity search of each; merged without a tokenizer."""
    folder = tmp_path_factory.mktemp("html")
    run = ScriptedRun(folder / "run", {"baseline": "vllm", "slo": {"ttft": 1000.0}})
    rng = np.random.default_rng(11)
    for server, ttft in (("vllm", 0.05), ("basic", 0.08)):
        for users in LEVELS:
            run.add(server, "qa", "stream", users, closed_loop(ttft * rng.uniform(0.9, 1.1, 40), users, prompts=20,
                                                               t0=1000.0 * users))
    with (run.path / "capacity.jsonl").open("w") as out:
        out.write(json.dumps(searched(8.3, 10.0, "vllm")) + "\n" + json.dumps(searched(2.1, 10.0, "basic")) + "\n")
    merge_run(run.path, folder / "report", use_tokenizer=False, use_calibration=False)
    return folder / "report"


def open_page(path, **options) -> tuple[dict, list[str], list[str]]:
    """The page's charts, tables and sections, its errors, and every request it tried beyond its own file."""
    return read_offline(path, READ_PAGE, **options)


def test_charts_draw_offline_and_the_tables_hold_the_csv_figures(report_dir):
    shown_page, errors, outside = open_page(report_dir / REPORT_HTML)
    assert errors == [] and outside == [], (errors, outside)
    assert shown_page["plotly"] == "object"
    charts = shown_page["charts"]
    assert set(charts) == {"curve-qa", "ratios", "capacity-qa"}, charts
    assert all(c["svgs"] >= 1 for c in charts.values()), charts
    # throughput against latency: each server's 3 levels in 2 panels, each point with its error bars
    assert charts["curve-qa"]["points"] == 2 * len(LEVELS) * 2 and charts["curve-qa"]["bars"] > 0, charts
    ratios = read_csv(report_dir / "ratios.csv")
    with_value = [r for r in ratios if r["metric"] != "capacity_rps" and r["value"] != ""]
    estimated = [r for r in Report.load(report_dir / REPORT_JSON).ratios if r.interval.value is not None]
    assert 0 < len(estimated) < len(with_value)  # a p99 of 40 requests pairs too few: not drawn
    assert charts["ratios"]["points"] == len(estimated) and charts["ratios"]["bars"] > 0, charts
    steps = sum(len(entry["steps"]) for entry in map(json.loads, (report_dir.parent / "run" / "capacity.jsonl")
                                                      .read_text().splitlines()))
    assert charts["capacity-qa"]["points"] == steps, charts
    # the summary table: every cell's throughput and TTFT p50 with their intervals, as summary.csv has them
    table = shown_page["tables"]["summary"]
    header, body = table[0], {tuple(row[:4]): row for row in table[1:]}
    assert len(body) == 2 * len(LEVELS)
    for row in read_csv(report_dir / "summary.csv"):
        line = body[(row["server"], row["task"], row["mode"], f"c{row['concurrency']}")]
        for column in ("output_token_throughput", "ttft_p50"):
            value, low, high = (float(row[column + suffix]) for suffix in ("", "_ci_low", "_ci_high"))
            assert line[header.index(title(column))] == (f"{shown(column, value)} [{shown(column, low)}, "
                                                          f"{shown(column, high)}]"), (column, line)
    # the ratios table: each server's output-token-throughput ratio with its interval, as ratios.csv has it
    table = shown_page["tables"]["ratios"]
    header = table[0]
    for r in (r for r in with_value if r["metric"] == "output_token_throughput"):
        (line,) = [x for x in table[1:] if x[0] == r["ratio"] and x[3] == f"c{r['concurrency']}"]
        assert line[header.index(title("output_token_throughput"))].startswith(
            f"{number(float(r['value']))} [{number(float(r['ci_low']))}, {number(float(r['ci_high']))}]")
    capacity = {row[0]: row for row in shown_page["tables"]["capacity"][1:]}
    for row in read_csv(report_dir / "capacity.csv"):
        assert capacity[row["server"]][5].startswith(number(float(row["capacity_rps"])))
    expected = [t for t in RUN_SECTIONS.titles() if t in shown_page["sections"]]
    assert shown_page["sections"] == expected and "Throughput and latency" in expected


def test_without_javascript_the_tables_are_there(report_dir):
    page, errors, outside = open_page(report_dir / REPORT_HTML, java_script_enabled=False)
    assert errors == [] and outside == []
    assert all(c["svgs"] == 0 for c in page["charts"].values())  # no chart drawn
    assert {"summary", "ratios", "capacity"} <= set(page["tables"])
    assert len(page["tables"]["summary"]) == 1 + 2 * len(LEVELS)
