"""What a run leaves behind, from the live board: the summary JSON and the end-of-run line."""

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.core.metrics import RequestResult, request_metrics
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.options import LoadSettings
from llmload.loadgen.outputs import end_line, summary_data, write_json

pytestmark = pytest.mark.unit


def board_of(count: int) -> LiveBoard:
    board = LiveBoard()
    now = time.time()
    for i in range(count):
        r = RequestResult(str(i), "chat", "chat", "stream", now - 5 + i * 0.01, 0.2, [0.1, 0.15, 0.2],
                          output_tokens=3, output_tokens_source="usage", intended_start=now - 5 + i * 0.01 - 0.002)
        board.add(r, request_metrics(r))
    board.counts.late = 2
    return board


def test_the_summary_holds_the_boards_figures_as_plain_json(tmp_path):
    settings = LoadSettings.from_options(SimpleNamespace(rate=20.0, requests=50, slo="ttft=500"))
    data = summary_data(board_of(50), settings, users=4, lag_warned=False, raw_log=Path("x_requests.jsonl"),
                        workers=[{"worker": "w0", "results": 50, "left": None}])
    path = write_json(tmp_path / "out" / "x_summary.json", data)
    again = json.loads(path.read_text())
    assert again["summary"]["requests"] == 50 and again["late_requests"] == 2 and again["exact"] is False
    assert again["settings"]["arrival"] == "poisson" and again["settings"]["slo"] == {"ttft": 500.0}
    assert math.isclose(again["summary"]["ttft_p50"], 0.1, rel_tol=0.01) and again["workers"][0]["results"] == 50
    assert not (tmp_path / "out" / "x_summary.json.tmp").exists()


def test_the_end_line_says_where_the_raw_log_is_and_any_outage():
    board = board_of(10)
    assert end_line(board, Path("r.jsonl")).startswith("llmload: 10 requests, 0 failed")
    assert end_line(board, Path("r.jsonl")).endswith("; raw log r.jsonl") and "unreachable" not in end_line(board, None)
    board.reach[""].closed_s = 2.5
    assert "; the server was unreachable for 2.5 s" in end_line(board, None)
