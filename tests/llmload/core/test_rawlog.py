"""The raw log: appended as results arrive, flushed on time, readable up to a cut last line."""

import time

import pytest

from llmload.core.metrics import RequestResult
from llmload.core.rawlog import RawLogWriter, iter_results, read_results

pytestmark = pytest.mark.unit


def result(i: int) -> RequestResult:
    return RequestResult(str(i), "qa", "chat", "stream", 1000.0 + i, 0.5, [0.1, 0.2], output_tokens=2)


def test_results_reach_the_file_within_the_flush_interval_without_close(tmp_path):
    path = tmp_path / "run_requests.jsonl"
    writer = RawLogWriter(path, flush_s=0.05)
    writer.write(result(0))
    time.sleep(0.06)
    writer.write(result(1))  # past the interval: both lines are handed to the OS now
    assert [r.request_id for r in read_results(path)] == ["0", "1"]
    writer.flush()
    writer.close()
    assert writer.closed and writer.count == 2


def test_a_line_cut_by_a_kill_is_skipped_and_a_broken_line_is_named(tmp_path):
    path = tmp_path / "cut_requests.jsonl"
    path.write_text(result(0).to_json() + "\n" + result(1).to_json()[:40])
    assert [r.request_id for r in iter_results(path)] == ["0"]
    path.write_text("{broken\n" + result(0).to_json() + "\n")
    try:
        read_results(path)
    except ValueError as exc:
        assert "cut_requests.jsonl:1" in str(exc)
    else:
        raise AssertionError("a broken line inside the file must be an error")


def test_the_request_identity_and_the_servers_timing_round_trip_and_old_logs_still_load(tmp_path):
    path = tmp_path / "ids_requests.jsonl"
    timed = RequestResult("0af7651916cd43dd8448eb211c80319c", "qa", "chat", "stream", 1000.0, 0.5, [0.1],
                          span_id="b7ad6b7169203331", server_timing={"queue_time_ms": 1.5, "mean_itl_ms": 20})
    old = result(1).to_json().replace(',"span_id":"","server_timing":null', "")  # a line written before them
    assert "span_id" not in old
    path.write_text(timed.to_json() + "\n" + old + "\n")
    back = read_results(path)
    assert back[0] == timed and back[0].server_timing == {"queue_time_ms": 1.5, "mean_itl_ms": 20}
    assert back[1] == result(1) and (back[1].span_id, back[1].server_timing) == ("", None)
