"""The client and its transport against a scripted server: line timing, faults as data, connection reuse.

These run in the test process (gevent sockets without monkey-patching; the server is a thread).
"""

import pytest
from geventhttpclient.client import HTTPClientPool

from fault_server import TOKENS, start_in_thread
from llmload.core.client import LLMClient
from llmload.core.transport import HTTPTransport
from llmload.core.wire import GenerationParams
from llmload.core.metrics import request_metrics
from llmload.core.records import PromptRecord
from llmload.core.services import free_port

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
