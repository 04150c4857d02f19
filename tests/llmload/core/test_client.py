"""The client and its transport against a scripted server: line timing, faults as data, connection reuse.

These run in the test process (gevent sockets without monkey-patching; the server is a thread).
"""

import re

import pytest
from geventhttpclient.client import HTTPClientPool

from fault_server import SPLIT, SPLIT_GAP, TIMING, TOKENS, start_in_thread
from llmload.core.client import LLMClient
from llmload.core.transport import HTTPTransport
from llmload.core.apis import APIS, GenerationParams
from llmload.core.metrics import request_metrics
from llmload.core.records import PromptRecord
from llmload.core.services import free_port

pytestmark = pytest.mark.unit

RECORD = PromptRecord(id="p1", task="chat", source="test", prompt="Hi", messages=({"role": "user", "content": "Hi"},),
                      max_tokens=8, input_tokens=1)
GAP = 0.3


@pytest.fixture(scope="module")
def server():
    srv = start_in_thread(gap=GAP)
    yield srv
    srv.shutdown()


def make_client(url, api="chat", mode="stream", timeout=5.0):
    pool = HTTPClientPool(network_timeout=timeout, connection_timeout=timeout, concurrency=1)
    transport = HTTPTransport(url, pool, {"Authorization": "Bearer k"})
    return LLMClient(transport, GenerationParams(api=api, mode=mode, max_tokens=8), "chat", timeout=timeout)


@pytest.mark.serial
def test_small_events_are_timed_on_arrival_not_after_a_buffer_fills(server):
    # Each event is ~80 bytes, 0.3 s apart: a 1 KiB read buffer would hold them all back to the end.
    client = make_client(server.url)
    result = client.generate(RECORD, "slow")
    assert result.success, result.error
    assert server.last_headers.get("Accept-Encoding") == "identity"
    assert server.last_headers.get("Authorization") == "Bearer k"
    assert len(result.token_offsets) == 3  # the role-only chunk sent at once is not a token
    # stamped when the server wrote them (the bound allows for the GIL shared with the server thread and a busy
    # machine; buffering would hold each token back by hundreds of milliseconds)
    arrived = [result.start_time + offset for offset in result.token_offsets]
    assert all(abs(a - sent) < 0.025 for a, sent in zip(arrived, server.sent_times)), (arrived, server.sent_times)
    m = request_metrics(result)
    assert m.ttft == pytest.approx(GAP, abs=0.05) and all(gap == pytest.approx(GAP, abs=0.05) for gap in m.itl)
    assert (result.output_tokens, result.output_tokens_source) == (3, "usage")


@pytest.mark.serial  # wall-clock bounds of a few ms
def test_an_event_split_across_reads_counts_when_it_is_whole(server):
    # Each event's line is cut in two (inside a multi-byte character), the halves SPLIT_GAP apart.
    client = make_client(server.url)
    result = client.generate(RECORD, "split")
    assert result.success, result.error
    assert result.output_text == "".join(SPLIT) and len(result.token_offsets) == len(SPLIT)
    arrived = [result.start_time + offset for offset in result.token_offsets]
    # stamped when the second half came (the first came SPLIT_GAP earlier)
    assert all(abs(a - whole) < SPLIT_GAP / 4 for a, whole in zip(arrived, server.sent_times)), (
        arrived, server.sent_times)
    assert client.generate(RECORD, "ok").success  # the connection went back to the pool clean


@pytest.mark.parametrize("api", ["chat", "completion"])
@pytest.mark.parametrize("mode", ["stream", "sync"])
def test_good_answers(server, api, mode):
    result = make_client(server.url, api, mode).generate(RECORD, "ok")
    assert result.success, result.error
    assert result.status_code == 200 and result.output_tokens == 3 and result.output_chars == len("".join(TOKENS))
    if mode == "stream":
        assert len(result.token_offsets) == 3 and result.end_offset >= result.token_offsets[-1]
    else:
        assert result.token_offsets == [] and result.end_offset >= 0.06


@pytest.mark.parametrize("behaviour, status, error", [
    ("http500", 500, "HTTP 500: internal server error: RuntimeError"),
    ("malformed", 200, "malformed SSE data (not JSON): '{this is not json'"),
    ("nodone", 200, "stream ended without [DONE]"),
    ("midstream", 200, "error event in the stream: generation failed: RuntimeError: out of memory"),
    ("stall", 200, "timed out after 1 s (--timeout)"),
    ("drop", 200, "before the response ended (mid-stream)"),
    ("nosuchmodel", 404, "HTTP 404: The model `nosuchmodel` does not exist."),
])
def test_faults_come_back_as_failed_results(server, behaviour, status, error):
    client = make_client(server.url, timeout=1.0)
    result = client.generate(RECORD, behaviour)
    assert not result.success
    assert result.status_code == status
    assert error in result.error and "\n" not in result.error
    # the same client (same pooled connection) still works afterwards
    assert client.generate(RECORD, "ok").success


def test_connection_refused_is_a_failed_result():
    url = f"http://127.0.0.1:{free_port()}"
    result = make_client(url).generate(RECORD, "ok")
    assert not result.success and result.status_code == 0
    assert result.error.startswith("connection refused by 127.0.0.1:")


def test_model_lookup(server):
    assert make_client(server.url).list_first_model() == "fault"


@pytest.mark.serial  # wall-clock bounds of a few ms
def test_reasoning_and_tool_calls_end_to_end(server):
    result = make_client(server.url).generate(RECORD, "thinking")
    assert result.success, result.error
    assert len(result.token_offsets) == 4  # two reasoning chunks, the tool call, the answer
    assert result.first_output_offset == result.token_offsets[2]  # the tool call starts the answer
    assert (result.reasoning_text, result.output_text, result.tool_calls) == (" think more", " alpha", 1)
    assert (result.output_tokens, result.reasoning_tokens) == (5, 2)
    m = request_metrics(result)
    assert m.ttfo - m.ttft == pytest.approx(0.04, abs=0.015)  # two 20 ms steps of reasoning before the answer


@pytest.mark.serial  # wall-clock bounds of a few ms
def test_chunks_of_several_tokens_are_counted_by_the_tokenizer_when_one_is_at_hand(server):
    without = make_client(server.url, api="completion").generate(RECORD, "chunky")
    assert without.success and without.chunk_tokens_source == "chunks" and "itl_per_chunk" in without.flags
    assert len(request_metrics(without).itl) == 2  # one gap per chunk: ITL twice the per-token truth
    words = lambda texts: [len(t.split()) for t in texts]  # noqa: E731 - the chunks' true counts
    client = make_client(server.url, api="completion")
    client.chunk_counter = words
    result = client.generate(RECORD, "chunky")
    assert (result.chunk_tokens, result.chunk_tokens_source, result.flags) == ([2, 2, 2], "tokenizer", [])
    m = request_metrics(result)
    assert len(m.itl) == 4 and all(gap == pytest.approx(0.02, abs=0.015) for gap in m.itl)
    assert m.tpot == pytest.approx(0.02, abs=0.01)


@pytest.mark.model
def test_the_model_tokenizer_counts_chunks(server, default_model):
    from llmload.tasks.tokens import TokenCounter

    counter = TokenCounter.load(default_model)
    client = make_client(server.url, api="completion")
    client.chunk_counter = counter.text_tokens
    result = client.generate(RECORD, "chunky")
    assert result.chunk_tokens_source == "tokenizer"
    assert result.chunk_tokens == counter.text_tokens([" one two", " three four", " five six"])


@pytest.mark.parametrize("mode", ["stream", "sync"])
def test_responses_api(server, mode):
    result = make_client(server.url, api="responses", mode=mode).generate(RECORD, "ok")
    assert result.success, result.error
    assert (result.output_text, result.output_tokens, result.prompt_tokens, result.reasoning_tokens) == (
        "".join(TOKENS), 3, 3, 0)
    assert len(result.token_offsets) == (3 if mode == "stream" else 0)


def test_responses_against_a_server_without_the_endpoint():
    srv = start_in_thread(no_responses=True)
    try:
        result = make_client(srv.url, api="responses").generate(RECORD, "ok")
    finally:
        srv.shutdown()
    assert not result.success and result.status_code == 404
    assert result.error == "HTTP 404: the server has no /v1/responses (Not Found)"


TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["stream", "sync"])
def test_each_request_carries_its_id_and_a_traceparent(server, api, mode):
    client = make_client(server.url, api, mode)
    results, received = [], []
    for _ in range(2):
        results.append(client.generate(RECORD, "ok"))
        received.append({name.lower(): value for name, value in server.last_headers.items()})
    for result, headers in zip(results, received):
        assert result.success, result.error
        assert headers["x-request-id"] == result.request_id
        assert TRACEPARENT.match(headers["traceparent"]).groups() == (result.request_id, result.span_id)
        assert headers["authorization"] == "Bearer k"  # the transport's own headers still go
        assert headers["accept"] == ("text/event-stream" if mode == "stream" else "application/json")
    assert results[0].request_id != results[1].request_id and results[0].span_id != results[1].span_id


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["stream", "sync"])
def test_the_servers_own_timing_reaches_the_result(server, api, mode):
    client = make_client(server.url, api, mode)
    result = client.generate(RECORD, "timed")
    assert result.success and result.flags == [], result.error
    assert result.server_timing == {k: v for k, v in TIMING.items() if k != "speculative_decoding"}
    assert client.generate(RECORD, "ok").server_timing is None
