"""The report's typed rows: a row's record and its lookups agree, repeats pool into one row per load point."""

from __future__ import annotations

import numpy as np
import pytest

from llmload.core.points import Load, Point
from reports.rows import ratios_of, run_rows
from reports.run import load_run
from report_helpers import ScriptedRun, closed_loop

pytestmark = pytest.mark.unit


def test_rows_of_cells_and_of_repeats_pooled(tmp_path):
    run = ScriptedRun(tmp_path / "run")
    rng = np.random.default_rng(1)
    for repeat in range(3):
        run.add("a", "qa", "stream", 2, closed_loop(0.1 * rng.uniform(0.9, 1.1, 60), 2, prompts=8), repeat=repeat)
    run.add("b", "qa", "stream", 2, closed_loop(0.2 * rng.uniform(0.9, 1.1, 60), 2, prompts=8))
    run.add("b", "qa", "stream", 4, [], status="failed", error="boom")
    cells, groups = run_rows(load_run(run.path))
    assert len(cells) == 5 and [g.point.label for g in groups] == ["a qa stream c2", "b qa stream c2",
                                                                    "b qa stream c4"]
    pooled, single, failed = groups
    assert pooled.repeat is None and len(pooled.estimates.repeats) == 3 and pooled.get("repeats") == 3
    assert single.repeat == 0 and single.estimates.repeats == [cells[3].estimates]
    assert not failed.ok and failed.get("error") == "boom" and failed.estimates.requests is None
    for row in cells + groups:  # every column a row's CSV line holds, its lookup gives
        assert all(row.get(column) == value for column, value in row.record().items())
    iv = pooled.interval("ttft_p50")
    assert iv.covers.startswith("across") and pooled.get("ttft_p50_ci_low") == iv.low
    assert pooled.get("ttft_p50") == pytest.approx(np.mean([c.interval("ttft_p50").value for c in cells[:3]]))
    # b over a at the same point: about 2 (TTFT), a ratio of two rows' figures with its interval
    found = ratios_of(single, pooled, ["ttft_p50"], ("test",), None)
    value, ratio_iv, method = found["ttft_p50"]
    assert value == pytest.approx(2.0, rel=0.15) and method in ("paired", "unpaired") and ratio_iv.has_interval
    assert single.point.shared == pooled.point.shared and single.point == Point("b", "qa", "stream", Load(2))
