"""The distributed protocol without Locust: who may join, reports merged in order, a lost worker retired."""

from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest

from llmload.core.metrics import RequestResult
from llmload.core.rawlog import RawLogWriter, read_results
from llmload.loadgen.budget import Budget
from llmload.loadgen.cluster import (Cluster, code_version, fingerprint, mismatch, option_texts, shard_folder,
                                     shard_path)
from llmload.loadgen.options import LoadSettings
from llmload.loadgen.sink import ResultSink

pytestmark = pytest.mark.unit


def result(node: str, i: int) -> RequestResult:
    offsets = [0.1, 0.12, 0.14]
    return RequestResult(f"{node}-{i}", "chat", "chat", "stream", 1_000_000.0 + i, 0.14, offsets, output_tokens=3,
                         output_tokens_source="usage", worker=node)


def settings(**options) -> LoadSettings:
    return LoadSettings.from_options(SimpleNamespace(**options))


def test_a_worker_joins_only_with_the_masters_code_options_and_tasks():
    master = fingerprint(settings(requests=100, mode="stream"), ["chat"], code="abc")
    assert mismatch(master, fingerprint(settings(), ["chat", "qa"], code="abc")) is None  # no options of its own
    assert mismatch(master, fingerprint(settings(requests=100), ["chat"], code="abc")) is None  # the same ones
    assert "llmload code xyz, the master abc" in mismatch(master, fingerprint(settings(), ["chat"], code="xyz"))
    why = mismatch(master, fingerprint(settings(mode="sync"), ["chat"], code="abc"))
    assert "started with --mode sync, the master with the default" in why
    assert "--requests 5, the master with 100" in mismatch(master, fingerprint(settings(requests=5), ["chat"], "abc"))
    assert "no user class for task(s) chat" in mismatch(master, fingerprint(settings(), ["qa"], code="abc"))
    assert "no llmload fingerprint" in mismatch(master, None)


def test_a_secret_is_compared_without_being_shown():
    texts = option_texts(settings(api_key="sk-very-secret", slo="ttft=500"))
    assert "sk-very-secret" not in str(texts) and texts["--api-key"].startswith("<secret ")
    assert option_texts(settings()) == {}


def test_the_code_version_follows_the_code(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    first = code_version(tmp_path)
    assert code_version(tmp_path) == first and len(first) == 12
    (tmp_path / "a.py").write_text("x = 2\n")
    assert code_version(tmp_path) != first


def test_shards_live_beside_the_raw_log():
    folder = shard_folder(Path("results/chat64_requests.jsonl"))
    assert str(folder) == "results/chat64_requests.shards"
    assert shard_path(folder, 3, "host_abc").name == "w3-host_abc.jsonl"


def worker(tmp_path, node: str):
    return ResultSink(None, RawLogWriter(tmp_path / f"{node}.jsonl", keep=True), delta=True)


def report(sink: ResultSink, run: str = "r1", final: bool = False) -> dict:
    part = {"run": run, "cut": sink.cut(taken=sink.done + sink.in_flight, users=2).to_wire(), "final": final}
    return msgpack.unpackb(msgpack.packb(part), raw=False)


def test_reports_merge_into_one_raw_log_board_and_count_in_offset_order(tmp_path):
    rows = []
    budget = Budget(requests=10)
    master = ResultSink(None, RawLogWriter(tmp_path / "run.jsonl"), rows=lambda r, m: rows.append(r))
    cluster = Cluster("r1", master, budget)
    a, b = worker(tmp_path, "a"), worker(tmp_path, "b")
    budget.grant("a", 6)
    budget.grant("b", 4)
    for i in range(3):
        a.collect(result("a", i))
    early = report(a)
    for i in range(3, 6):
        a.collect(result("a", i))
    late = report(a, final=True)
    for i in range(4):
        b.collect(result("b", i))
    assert cluster.report("a", late).offset == 0  # ahead of its turn: held back
    cluster.report("b", report(b, final=True))
    assert cluster.report("a", early).lines == 6  # now both, in order
    assert cluster.report("a", {"run": "other", "cut": None}) is None  # another run's report
    master.raw_log.flush()
    logged = [r.request_id for r in read_results(master.raw_log.path)]
    assert sorted(logged) == sorted([f"a-{i}" for i in range(6)] + [f"b-{i}" for i in range(4)])
    assert logged.index("a-0") < logged.index("a-3")
    assert cluster.completed == 10 and budget.held == {"a": 0, "b": 0} and budget.exhausted
    assert master.board.total().requests == 10 and rows == []  # workers' rows come with Locust's own stats
    assert cluster.complete_until(["a", "b"]) > 0 and not cluster.members["a"].active


def test_a_lost_worker_is_read_back_from_its_shard_and_its_tickets_return(tmp_path):
    rows = []
    budget = Budget(requests=20)
    master = ResultSink(None, RawLogWriter(tmp_path / "run.jsonl"), rows=lambda r, m: rows.append(r.request_id))
    cluster = Cluster("r1", master, budget)
    sink = worker(tmp_path, "a")
    budget.grant("a", 12)
    for i in range(4):
        sink.started()
    for i in range(3):
        sink.collect(result("a", i))
    cluster.report("a", report(sink))  # 3 done, 1 in flight at its last report
    for i in range(3, 7):
        sink.started()
        sink.collect(result("a", i))  # then 4 more, flushed to its shard, never reported
    sink.raw_log.flush()
    retired = cluster.retire("a", "lost", "chat", "stream", ["chat"])
    assert (retired.recovered, retired.lost, retired.returned) == (4, 1, 12 - 7)
    assert "4 result(s) after its last report read from its shard" in retired.shard_note
    master.raw_log.flush()
    results = read_results(master.raw_log.path)
    assert [r.request_id for r in results[:7]] == [f"a-{i}" for i in range(7)]
    assert results[7].flags == ["lost"] and "worker a disappeared" in results[7].error
    assert rows == ["a-3", "a-4", "a-5", "a-6", results[7].request_id]  # read back and lost: into the stats here
    assert cluster.completed == 7 and budget.remaining == 13 and master.board.total().requests == 8
    assert cluster.report("a", report(sink)) is None  # it was retired: what it says now stays out


def test_a_worker_lost_before_any_report_counts_one_request_per_user_in_flight(tmp_path):
    budget = Budget(requests=20)
    cluster = Cluster("r1", ResultSink(None, None), budget)
    budget.grant("a", 6)
    cluster.asked("a", {"users": 2, "shard": str(tmp_path / "gone.jsonl")})
    retired = cluster.retire("a", "lost", "chat", "stream", ["chat"])
    assert (retired.recovered, retired.lost, retired.returned) == (0, 2, 6) and budget.remaining == 20


def test_crossed_reports_keep_the_newer_gauges_and_a_bare_final_counts(tmp_path):
    cluster = Cluster("r1", ResultSink(None, None), Budget(requests=10))
    sink = worker(tmp_path, "a")
    sink.started()
    first = report(sink)
    sink.collect(result("a", 0))
    second = report(sink)
    cluster.report("a", second)
    cluster.report("a", first)  # arrived late: its counts add, its gauges do not replace the newer ones
    member = cluster.members["a"]
    assert (member.done, member.in_flight) == (1, 0) and cluster.board.total().requests == 1
    assert cluster.report("b", {"run": "r1", "final": True}).final  # a worker with nothing in this run
