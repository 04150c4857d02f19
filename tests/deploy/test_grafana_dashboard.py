"""The Grafana dashboard (deploy/grafana/llmload.json): a well-formed dashboard whose panels chart series that the
/metrics exporter really serves."""

from __future__ import annotations

import json
import re
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmload.core.clienterror import ClockReading
from llmload.core.metrics import RequestResult, request_metrics
from llmload.core.paths import REPO_ROOT
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.prometheus import LiveCollector, Scrape

pytestmark = pytest.mark.unit

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "llmload.json"
SERIES = re.compile(r"\b(llmload_[a-z0-9_]+)\b")
GRID_COLUMNS = 24


def served_series() -> set[str]:
    """Every series name a scrape of a busy open-loop run with an SLO holds."""
    board = LiveBoard(histograms=True)
    now = time.time()
    for i in range(20):
        offsets = [0.05 + 0.01 * k for k in range(5)]
        r = RequestResult(str(i), "chat", "chat", "stream", now - 5 + i * 0.1, end_offset=offsets[-1],
                          token_offsets=offsets, output_tokens=5, output_tokens_source="usage",
                          intended_start=now - 5 + i * 0.1 - 0.001, slo_ok=i % 2 == 0)
        board.add(r, request_metrics(r))
    board.clock["w1"] = ClockReading(cpu_s=0.2, wall_s=1.0)
    board.clock["w1"].add(0.001)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(lambda: Scrape("run1", board, 4)))
    return {s.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}


def test_the_dashboard_is_well_formed():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["title"] and dash["uid"] and isinstance(dash["schemaVersion"], int)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 10
    cells = set()
    for panel in dash["panels"]:
        assert panel["type"] == "timeseries" and panel["title"], panel
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        grid = panel["gridPos"]
        assert all(isinstance(grid[k], int) for k in "hwxy") and grid["x"] + grid["w"] <= GRID_COLUMNS
        for x in range(grid["x"], grid["x"] + grid["w"]):  # no two panels overlap
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]
            for name in re.findall(r"\$(\w+)", target["expr"]):
                assert name in variables or name == "__rate_interval", (panel["title"], name)


def test_every_series_the_dashboard_charts_is_served():
    served = served_series()
    dash = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    queries += [v["definition"] for v in dash["templating"]["list"] if v.get("definition")]
    charted = {name for q in queries for name in SERIES.findall(q)}
    assert charted and not charted - served, sorted(charted - served)
    # and every family the exporter serves has a panel (a new series needs one)
    families = {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in served}
    charted_families = {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in charted}
    assert families <= charted_families, sorted(families - charted_families)
