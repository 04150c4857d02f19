"""What a run says while it runs, from the live board, each thing once."""

import time

import pytest

from llmload.core.metrics import RequestResult, request_metrics
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.watch import NO_SERVER_S, Watch

pytestmark = pytest.mark.unit


def add(board: LiveBoard, result: RequestResult) -> None:
    board.add(result, request_metrics(result))


def test_a_lag_past_5_ms_is_said_once_with_the_late_requests():
    board, watch = LiveBoard(), Watch()
    now = time.time()
    for i in range(50):
        add(board, RequestResult(str(i), "chat", "chat", "stream", now - 3 + i * 0.01, 0.1, [0.05, 0.1],
                                 output_tokens=2, intended_start=now - 3 + i * 0.01 - (0.02 if i % 2 else 0.001)))
    board.counts.late = 7
    line = watch.behind(board, users=4)
    assert "dispatch lag p99 20.0 ms over the last seconds; 7 request(s) were due while all 4 users" in line
    assert watch.behind(board, users=4) is None and watch.behind(board, 4, final=True) is None  # once


def test_a_refused_server_is_said_after_ten_seconds_or_at_the_end():
    board, watch = LiveBoard(), Watch()
    start = time.time()
    add(board, RequestResult("0", "chat", "chat", "stream", start, 0.0, success=False, flags=["unreachable"]))
    assert watch.no_server(board, "http://x:1", now=start + NO_SERVER_S - 1) is None
    assert "no server answered at http://x:1" in watch.no_server(board, "http://x:1", now=start + NO_SERVER_S + 1)
    assert watch.no_server(board, "http://x:1", at_stop=True) is None  # once
    other = LiveBoard()
    add(other, RequestResult("1", "chat", "chat", "stream", start, 0.0, success=False, error="HTTP 500"))
    assert Watch().no_server(other, "h", at_stop=True) is None  # failures of another kind: the server is there
