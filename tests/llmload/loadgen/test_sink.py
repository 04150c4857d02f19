"""The results sink: each result counted once into the raw log (or a shard), the board and the rows; cuts on a worker."""

import errno

import msgpack
import pytest

from llmload.core.metrics import SLO, RequestResult
from llmload.core.rawlog import RawLogWriter, read_results, read_tail
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.sink import ResultSink

pytestmark = pytest.mark.unit


def result(i: int, e2e: float = 0.3, **kw) -> RequestResult:
    offsets = [0.1 + (e2e - 0.1) * k / 3 for k in range(4)]
    return RequestResult(str(i), "chat", "chat", "stream", 1_000_000.0 + i, e2e, offsets, output_tokens=4,
                         output_tokens_source="usage", **kw)


def test_a_worker_sink_cuts_what_it_counted_since_the_last_cut(tmp_path):
    rows = []
    shard = RawLogWriter(tmp_path / "w0.jsonl", keep=True)
    sink = ResultSink(SLO(e2e=0.5), shard, rows=lambda r, m: rows.append(r.request_id), delta=True)
    for i in range(5):
        sink.started()
        sink.collect(result(i, e2e=0.3 if i % 2 else 0.7, warmup=i == 0))
    sink.started()  # one still in flight
    first = sink.cut(taken=6, users=2)
    assert (first.done, first.in_flight, first.taken, first.users) == (5, 1, 6, 2)
    assert rows == ["1", "2", "3", "4"]  # warm-up: in the raw log, not in Locust's rows
    shard.flush()
    assert [r.slo_ok for r in read_results(shard.path)] == [False, True, False, True, False]
    assert first.shard["offset"] == 0 and first.shard["lines"] == 5
    assert first.shard["data"] == shard.path.read_bytes()  # the chunk is the file, byte for byte
    assert LiveBoard.from_wire(first.board).total().requests == 4
    sink.collect(result(5))
    second = sink.cut(taken=6, users=2)
    assert second.shard["offset"] == len(first.shard["data"]) and second.shard["lines"] == 1
    assert LiveBoard.from_wire(second.board).total().requests == 1 and second.in_flight == 0
    wire = msgpack.unpackb(msgpack.packb(second.to_wire()), raw=False)  # as Locust carries it
    assert wire["shard"]["data"] == second.shard["data"] and wire["done"] == 6
    shard.flush()
    data, tail = read_tail(shard.path, first.shard["offset"] + len(first.shard["data"]))
    assert data == second.shard["data"] and [r.request_id for r in tail] == ["5"]


def test_a_standalone_sink_keeps_its_board_and_no_chunks(tmp_path):
    sink = ResultSink(None, RawLogWriter(tmp_path / "run.jsonl"))
    for i in range(3):
        sink.collect(result(i))
    cut = sink.cut(taken=3, users=1)
    assert cut.shard is None and sink.board.total().requests == 3 and cut.done == 3


def test_a_result_that_cannot_be_written_counts_nowhere(tmp_path):
    full = RawLogWriter("/dev/full", flush_s=0.0, keep=True)
    sink = ResultSink(None, full, delta=True)
    sink.started()
    with pytest.raises(OSError) as exc:
        sink.collect(result(0))
    assert exc.value.errno == errno.ENOSPC
    cut = sink.cut(taken=1, users=1)
    assert cut.done == 0 and cut.in_flight == 1 and cut.shard["lines"] == 0 and not cut.shard["data"]
    assert LiveBoard.from_wire(cut.board).total().requests == 0


def test_read_tail_leaves_out_a_cut_last_line_and_names_a_broken_one(tmp_path):
    path = tmp_path / "shard.jsonl"
    lines = [result(i).to_json() + "\n" for i in range(3)]
    path.write_text(lines[0] + lines[1] + lines[2][:30])
    data, results = read_tail(path, len(lines[0].encode()))
    assert data == lines[1].encode() and [r.request_id for r in results] == ["1"]
    assert read_tail(path, path.stat().st_size + 100) == (b"", [])  # past the end: nothing
    path.write_text(lines[0] + "{broken\n")
    with pytest.raises(ValueError, match="line 1 after byte"):
        read_tail(path, len(lines[0].encode()))
