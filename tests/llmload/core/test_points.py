"""The load point: its labels and tags, and its round trip through the run files' and the CSVs' columns."""

from __future__ import annotations

import pytest

from llmload.core.points import Load, Point
from llmload.core.runfiles import Cell

pytestmark = pytest.mark.unit


def test_closed_and_open_loads_have_one_label_tag_and_description_each():
    closed, open_ = Load(8), Load(16, 2.5)
    assert (closed.label, closed.tag, closed.describe(), closed.closed) == ("c8", "c8", "c=8", True)
    assert (open_.label, open_.tag, open_.describe(), open_.closed) == ("r2.5/s", "r2.5", "rate=2.5/s pool=16", False)


def test_a_point_round_trips_through_its_record_and_labels_its_phase():
    point = Point("mock", "qa", "stream", Load(6, 3.0), "sweep")
    record = point.record()
    assert record == {"server": "mock", "task": "qa", "mode": "stream", "concurrency": 6, "rate": 3.0, "phase": "sweep"}
    assert Point.of(record) == point and point.label == "mock qa stream r3/s sweep"
    # a CSV row: strings, an empty rate, no phase column
    assert Point.of({"server": "s", "task": "qa", "mode": "sync", "concurrency": "4", "rate": ""}) == \
        Point("s", "qa", "sync", Load(4))
    assert Point("s", "qa", "sync", Load(4)).label == "s qa sync c4"
    assert point.shared == Point.of({**record, "server": "other"}).shared != Point.of({**record, "rate": 2.0}).shared


def test_a_cell_is_made_at_its_point_and_gives_it_back():
    point = Point("s", "qa", "stream", Load(4, 2.0), "capacity")
    cell = Cell.at(point, "s/capacity/qa_stream_r2_look2", repeat=1, requests=96)
    assert (cell.concurrency, cell.rate, cell.phase, cell.repeat, cell.requests) == (4, 2.0, "capacity", 1, 96)
    assert cell.point == point and cell.key == ("s", "qa", "stream", 4, 2.0, 1)
