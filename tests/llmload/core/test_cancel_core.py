"""Cancellation: ``--cancel-after`` parsing, the seeded draw of which requests cancel, the client closing the stream at
its point, and the summary counting cancels apart from failures and latencies."""

import argparse

import pytest
from geventhttpclient.client import HTTPClientPool

from fault_server import TOKENS, start_in_thread
from llmload.core.cancel import CancelAfter, CancelPoint, CancelPolicy, cancel_after_text, parse_cancel_after
from llmload.core.cliargs import request_share
from llmload.core.client import LLMClient
from llmload.core.metrics import LiveStats, RequestResult, SLO, summarize
from llmload.core.records import PromptRecord
from llmload.core.transport import HTTPTransport
from llmload.core.apis import GenerationParams

pytestmark = pytest.mark.unit

RECORD = PromptRecord(id="p1", task="chat", source="test", prompt="Hi", messages=({"role": "user", "content": "Hi"},),
                      max_tokens=8, input_tokens=1)
GAP = 0.3


@pytest.mark.parametrize("text, expected", [
    ("2s", CancelAfter("send", 2.0, 2.0)),
    ("500ms", CancelAfter("send", 0.5, 0.5)),
    ("ttft+1s", CancelAfter("ttft", 1.0, 1.0)),
    ("20tok", CancelAfter("tokens", 20, 20)),
    ("1s..3s", CancelAfter("send", 1.0, 3.0)),
    ("ttft+200ms..1s", CancelAfter("ttft", 0.2, 1.0)),
    ("ttft+0.2s..ttft+1s", CancelAfter("ttft", 0.2, 1.0)),
    ("10tok..50tok", CancelAfter("tokens", 10, 50)),
])
def test_cancel_after_forms(text, expected):
    assert parse_cancel_after(text) == expected


@pytest.mark.parametrize("text", ["soon", "0s", "-1s", "0tok", "1s..5tok", "3s..1s", "ttft+", "ttft+2s..1s",
                                  "1.5tok"])
def test_bad_cancel_after_is_one_line(text):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        cancel_after_text(text)
    assert "\n" not in str(info.value) and repr(text) in str(info.value)
    assert cancel_after_text(" ") == ""  # the default: no cancel point


@pytest.mark.parametrize("text", ["-0.1", "1.01", "nan", "half", "2"])
def test_cancel_rate_outside_0_1_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a share of requests in \[0, 1\]"):
        request_share(text)
    assert request_share("0") == 0.0 and request_share("1") == 1.0 and request_share("0.3") == 0.3


def test_the_draw_is_seeded_per_request_index_and_keeps_the_share():
    after = parse_cancel_after("1s..3s")
    a, b = CancelPolicy(0.3, after, seed=7), CancelPolicy(0.3, after, seed=7)
    points = [a.point(i) for i in range(4000)]
    assert [b.point(i) for i in reversed(range(4000))][::-1] == points  # by index, not by order of asking
    share = sum(p is not None for p in points) / len(points)
    assert share == pytest.approx(0.3, abs=0.03)
    assert all(1.0 <= p.value <= 3.0 and p.kind == "send" for p in points if p is not None)
    assert [CancelPolicy(0.3, after, seed=8).point(i) for i in range(4000)] != points
    tokens = CancelPolicy(1.0, parse_cancel_after("10tok..12tok"))
    assert {tokens.point(i).value for i in range(200)} == {10.0, 11.0, 12.0}
    assert CancelPolicy(0.0, after).point(0) is None and CancelPolicy(1.0, after).point(0) is not None
    # without an index: each process's own sequence, the same for the same seed and process
    assert [CancelPolicy(0.5, after, 1, "w1").point() for _ in range(3)] == \
        [CancelPolicy(0.5, after, 1, "w1").point() for _ in range(3)]


def test_cancel_point_describes_itself():
    assert [CancelPoint("send", 1.25).describe(), CancelPoint("ttft", 0.5).describe(),
            CancelPoint("tokens", 20.0).describe()] == ["1.25s", "ttft+0.5s", "20tok"]


# --------------------------------------------------------------------------- the client closes the stream


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread(gap=GAP)
    yield srv
    srv.shutdown()


def generate(url, cancel, mode="stream"):
    pool = HTTPClientPool(network_timeout=5, connection_timeout=5, concurrency=1)
    client = LLMClient(HTTPTransport(url, pool), GenerationParams(api="chat", mode=mode, max_tokens=8), "chat",
                       timeout=5)
    return client.generate(RECORD, "slow", cancel=cancel)


@pytest.mark.parametrize("point, tokens, seconds", [
    (CancelPoint("tokens", 1), 1, GAP),  # right after the first token
    (CancelPoint("ttft", 0.1), 1, GAP + 0.1),
    (CancelPoint("send", 0.1), 0, 0.1),  # before any token
    (CancelPoint("send", 0.45), 1, 0.45),
])
@pytest.mark.serial  # wall-clock bounds
def test_the_client_closes_the_stream_at_its_point(server, point, tokens, seconds):
    result = generate(server.url, point)
    assert result.cancelled and not result.success and not result.failed and result.error == ""
    assert len(result.token_offsets) == tokens and result.output_tokens == tokens
    assert result.end_offset == pytest.approx(seconds, abs=0.1)
    assert result.cancel_after == point.describe()


def test_an_answer_complete_before_its_point_is_a_success(server):
    result = generate(server.url, CancelPoint("send", 3.0))
    assert result.success and not result.cancelled and len(result.token_offsets) == len(TOKENS)
    assert result.cancel_after == "3s"
    assert generate(server.url, CancelPoint("send", 0.1), mode="sync").cancelled


# --------------------------------------------------------------------------- the summary


def result(cancelled=False, success=True, ttft=0.2, start=1000.0, **kw):
    offsets = [ttft + 0.02 * i for i in range(10)]
    return RequestResult(request_id="r", task="chat", api="chat", mode="stream", start_time=start,
                         end_offset=offsets[-1], token_offsets=offsets, output_tokens=10,
                         success=success and not cancelled, cancelled=cancelled, error="" if success else "boom",
                         **kw)


def test_cancelled_requests_leave_the_latencies_and_count_apart():
    results = ([result(start=1000.0 + i, cancel_after="2s") for i in range(6)]
               + [result(cancelled=True, ttft=5.0, start=1001.5, cancel_after="ttft+0.1s") for _ in range(3)]
               + [result(success=False, start=1002.0)])
    for summary in (summarize(results), _live(results)):
        assert (summary.requests, summary.failures, summary.cancelled) == (10, 1, 3)
        assert summary.flat()["cancelled_pct"] == pytest.approx(30.0)
        assert summary.get("ttft", "p99") == pytest.approx(0.2, rel=0.02)  # the 5 s TTFTs are not in it
        assert summary.total_output_tokens == 60
        assert "3 cancelled" in summary.line()
    plain = summarize([result()])
    assert plain.cancelled is None and plain.flat()["cancelled_pct"] is None and "cancelled" not in plain.line()


def test_a_cancelled_request_is_not_judged_against_the_slo():
    slo = SLO(ttft=1.0)
    kept, cancelled = result(), result(cancelled=True, ttft=5.0, cancel_after="1s")
    assert slo.met(cancelled) is None
    kept.slo_ok = slo.met(kept)
    assert summarize([kept, cancelled]).slo_attainment == 100.0


def _live(results):
    stats = LiveStats()
    for r in results:
        stats.add(r)
    merged = LiveStats.from_wire(stats.to_wire())
    return merged.summary()
