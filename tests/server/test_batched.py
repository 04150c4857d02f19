"""The batched engine against the naive one, on the real embedded model.

Engine-level tests drive both engines in this process with the same requests
(different prompt lengths, per-request rules, staggered arrivals so requests
join a running batch and wait for a free slot) and compare what comes out.
HTTP-level tests start ``python -m server --engine batched`` and check what a
client sees: stream equals non-stream, nothing lost or duplicated under
concurrency, and a disconnect taking the sequence out of the batch.

About exact equality: each request's prefill runs alone, exactly as in the
naive engine, but decode steps run batched, where logits differ from the
naive engine's by float rounding (measured ~3e-5). Greedy outputs are equal
unless two candidate tokens tie to within that rounding; the comparison allows
at most one of the greedy requests to diverge (none did in development, over
8 requests x 200 tokens) and reports any divergence in full.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass

import httpx
import pytest
from server_client import (open_raw_request, post_ok, read_until_events, response_text, sample_while, scrape,
                           stream)

from server.engines.base import SamplingParams

pytestmark = pytest.mark.model

LONG_PROMPT = ("The history of the printing press begins in the fifteenth century, when movable type changed how "
               "books were made and read across Europe. ") * 8 + "In summary,"


@dataclass(frozen=True)
class Case:
    """One request of the comparison: prompt, API style, settings, arrival delay."""

    name: str
    prompt: str
    params: SamplingParams
    chat: bool = False
    delay: float = 0.0


GREEDY = dict(temperature=0.0)
CAPITAL = "What is the capital of France?"  # greedy answer: 8 tokens, the last one EOS
CASES = [
    Case("capital", CAPITAL, SamplingParams(max_tokens=12, **GREEDY), chat=True),
    Case("capital-ignore-eos", CAPITAL, SamplingParams(max_tokens=12, ignore_eos=True, **GREEDY), chat=True),
    Case("capital-min-tokens", CAPITAL, SamplingParams(max_tokens=12, min_tokens=10, **GREEDY), chat=True,
         delay=0.2),
    Case("fib-stop", "def fibonacci(n):", SamplingParams(max_tokens=16, stop=("return",), **GREEDY), delay=0.4),
    Case("long-prompt", LONG_PROMPT, SamplingParams(max_tokens=8, **GREEDY), delay=0.6),
    Case("one-token", "List three colors:", SamplingParams(max_tokens=1, **GREEDY), delay=0.8),
    Case("sampled-seeded", "Once upon a time", SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=7),
         delay=1.0),
]


@dataclass
class Outcome:
    text: str
    first_delta: str  # text released by the first token (produced by the prefill)
    completion_tokens: int
    finish_reason: str | None
    finishing_deltas: int


async def run_cases(engine, cases) -> dict[str, Outcome]:
    """Send every case at its delay, concurrently; collect each one's deltas."""

    async def one(case: Case) -> Outcome:
        await asyncio.sleep(case.delay)
        prompt = (engine.prepare_chat([{"role": "user", "content": case.prompt}]) if case.chat
                  else engine.prepare_completion(case.prompt))
        parts, finishing, last = [], 0, None
        async for delta in engine.generate(case.name, prompt, case.params):
            parts.append(delta.text)
            finishing += delta.finish_reason is not None
            last = delta
        return Outcome("".join(parts), parts[0], last.completion_tokens, last.finish_reason, finishing)

    results = await asyncio.gather(*(one(c) for c in cases))
    return {c.name: r for c, r in zip(cases, results)}


@pytest.fixture(scope="module")
def engines(default_model):
    """A naive and a batched engine (at most 4 sequences, so later requests wait) in this process.

    The batched one decodes on one thread (robust on a busy CI machine, see the engine's docstring).
    """
    import torch

    from server.engines.batched import BatchedEngine
    from server.engines.naive import NaiveEngine

    naive = NaiveEngine(default_model, "smol", 2048)
    batched = BatchedEngine(default_model, "smol", 2048, threads=1, max_num_seqs=4)
    threads = torch.get_num_threads()
    naive.start()
    batched.start()
    torch.set_num_threads(threads)  # loading also set it for this (the test) thread: undo that
    yield naive, batched
    naive.stop()
    batched.stop()


@pytest.fixture(scope="module")
def compared(engines):
    """Every case through both engines: ``(naive outcomes, batched outcomes, batched engine)``."""
    naive, batched = engines
    reference = asyncio.run(run_cases(naive, CASES))
    steps_before = batched.steps
    observed = asyncio.run(run_cases(batched, CASES))
    return reference, observed, batched, batched.steps - steps_before


@pytest.mark.integration
def test_every_request_finishes_exactly_once(compared):
    _, observed, _, _ = compared
    assert sorted(observed) == sorted(c.name for c in CASES)
    for name, outcome in observed.items():
        assert outcome.finishing_deltas == 1, name
        assert outcome.finish_reason in ("stop", "length"), name


@pytest.mark.integration
def test_outputs_equal_the_naive_engine(compared):
    reference, observed, _, _ = compared
    differ = {name: (reference[name], observed[name]) for name in reference if reference[name] != observed[name]}
    # Greedy requests must agree (at most one may diverge, after its first token, by float rounding);
    # the seeded sampled one draws from the same generator state, so it agrees too unless rounding moves a draw.
    assert len(differ) <= 1, f"outputs differ from the naive engine's: {differ}"
    for name, (want, got) in differ.items():
        assert got.first_delta == want.first_delta, f"{name} differs from its first token: {want} vs {got}"


@pytest.mark.integration
def test_per_request_rules_hold_side_by_side_in_one_batch(compared):
    _, out, _, _ = compared
    assert out["capital"].finish_reason == "stop" and out["capital"].completion_tokens < 10
    assert out["capital-ignore-eos"].finish_reason == "length"
    assert out["capital-ignore-eos"].completion_tokens == 12
    assert out["capital-ignore-eos"].text.startswith(out["capital"].text)
    assert out["capital-min-tokens"].completion_tokens >= 10
    assert out["fib-stop"].finish_reason == "stop" and "return" not in out["fib-stop"].text
    assert out["fib-stop"].text.strip()
    assert out["one-token"].completion_tokens == 1 and out["one-token"].finish_reason == "length"
    assert out["long-prompt"].completion_tokens == 8


@pytest.mark.integration
def test_requests_were_decoded_together(compared):
    _, observed, engine, steps = compared
    tokens = sum(o.completion_tokens for o in observed.values())
    assert engine.peak_batch >= 3
    # each request's first token comes from its prefill, the rest from shared decode steps
    assert steps < tokens - len(observed)


@pytest.mark.integration
def test_cancelled_sequence_leaves_the_batch_at_once_and_idle_frees_memory(engines):
    _, engine = engines

    async def scenario() -> tuple[int, int, float]:
        params = SamplingParams(max_tokens=400, ignore_eos=True, temperature=0.0)
        keep = engine.generate("keep", engine.prepare_completion("Count to a thousand: 1, 2,"), params)
        drop = engine.generate("drop", engine.prepare_completion("Name every planet:"), params)
        for _ in range(3):
            await keep.__anext__()
            await drop.__anext__()
        both = len(engine.running)
        await drop.aclose()  # what the HTTP layer does when the client goes away
        steps = engine.steps
        deadline = time.monotonic() + 30
        while len(engine.running) > 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        after_cancel = len(engine.running)
        steps_taken = engine.steps - steps
        await keep.aclose()
        return both, after_cancel, steps_taken

    both, after_cancel, steps_taken = asyncio.run(scenario())
    assert both == 2
    assert after_cancel == 1
    assert steps_taken <= 1, f"the cancelled sequence stayed for {steps_taken} decode steps"
    deadline = time.monotonic() + 30
    while (engine.running or engine.cache.nbytes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine.running == [] and not engine.waiting
    assert engine.cache.nbytes() == 0, "the KV buffers were not freed when the engine went idle"


def _prefill_cache(length: int, seed: int, layers: int = 2):
    """A one-sequence DynamicCache of ``length`` positions with recognisable random contents."""
    import torch
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    for layer in range(layers):
        cache.update(torch.randn(1, 3, length, 4, generator=gen), torch.randn(1, 3, length, 4, generator=gen), layer)
    return cache


@pytest.mark.unit
def test_slot_cache_rows_join_leave_and_step_without_touching_each_other():
    import torch

    from server.engines.batched import CAPACITY_STEP, SlotKVCache

    cache = SlotKVCache(num_layers=2, max_slots=4, max_len=600)
    sources = [_prefill_cache(n, seed) for seed, n in enumerate((5, 300, 7))]
    for source in sources:
        cache.add_row(source)
    assert cache.lengths == [5, 300, 7] and cache.capacity == 2 * CAPACITY_STEP
    cache.remove_row(0)  # the last row moves into row 0
    assert cache.lengths == [7, 300]
    assert torch.equal(cache.keys[1][0, :, :7], sources[2].layers[1].keys[0])
    assert torch.equal(cache.values[0][1, :, :300], sources[1].layers[0].values[0])

    positions, mask = cache.begin_step()
    assert positions.tolist() == [[7], [300]] and mask.shape == (2, 1, 1, 301)
    assert (mask[0, 0, 0, :8] == 0).all() and (mask[0, 0, 0, 8:] < -1e30).all() and (mask[1] == 0).all()
    new_k, new_v = torch.ones(2, 3, 1, 4), torch.full((2, 3, 1, 4), 2.0)
    keys, values = cache.write_step(0, new_k, new_v)
    cache.end_step()
    assert keys.shape == (2, 3, 301, 4) and cache.lengths == [8, 301]
    assert (keys[0, :, 7] == 1).all() and (values[1, :, 300] == 2).all()
    assert torch.equal(keys[0, :, :7], sources[2].layers[0].keys[0])  # earlier positions untouched

    assert cache.nbytes() <= 2 * 2 * 4 * 3 * 600 * 4 * 4  # layers x (K, V) x slots x heads x max_len x dim x 4 B
    cache.remove_row(1)
    cache.remove_row(0)
    cache.release()
    assert cache.nbytes() == 0 and cache.rows == 0


@pytest.mark.unit
def test_refuses_models_whose_attention_does_not_see_the_whole_context():
    from transformers import Gemma2Config, LlamaConfig, MistralConfig

    from server.engines.batched import check_full_attention

    check_full_attention(LlamaConfig(), 2048)
    check_full_attention(MistralConfig(sliding_window=4096), 2048)  # the window covers the context
    for config in (MistralConfig(sliding_window=1024), Gemma2Config(sliding_window=1024)):
        with pytest.raises(ValueError, match="sliding window of 1024 tokens"):
            check_full_attention(config, 2048)


@pytest.mark.unit
def test_rejects_a_batch_cap_below_one(default_model):
    from server.engines.batched import BatchedEngine

    with pytest.raises(ValueError, match="max_num_seqs"):
        BatchedEngine(default_model, "smol", max_num_seqs=0)


# --------------------------------------------------------------------------- through the HTTP server


def in_threads(calls) -> list:
    """Run zero-argument callables concurrently; return their results in order (re-raise the first error)."""
    results: list = [None] * len(calls)

    def run(i, call):
        try:
            results[i] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results


def health(url: str) -> dict:
    return httpx.get(url + "/health", timeout=10).json()


@pytest.mark.integration
def test_http_stream_equals_non_stream_in_a_shared_batch(batched_url):
    completion = {"prompt": "The three laws of robotics are", "max_tokens": 16, "temperature": 0}
    chat = {"messages": [{"role": "user", "content": "Name two rivers."}], "max_tokens": 16, "temperature": 0}
    usage = {"stream_options": {"include_usage": True}}
    pairs = in_threads([
        lambda: post_ok(batched_url, "/v1/completions", completion),
        lambda: stream(batched_url, "/v1/completions", {**completion, **usage}),
        lambda: post_ok(batched_url, "/v1/chat/completions", chat),
        lambda: stream(batched_url, "/v1/chat/completions", {**chat, **usage}),
    ])
    for sync, streamed in (pairs[0:2], pairs[2:4]):
        assert streamed.text() == response_text(sync) and streamed.text()
        assert streamed.finish_reason() == sync["choices"][0]["finish_reason"]
        assert streamed.usage()["completion_tokens"] == sync["usage"]["completion_tokens"]


@pytest.mark.integration
def test_http_no_request_lost_or_duplicated_beyond_the_batch_cap(batched_url):
    bodies = [{"prompt": f"Request {i}: the number {i} in words is", "max_tokens": 1 + i % 3,
               "temperature": 0, "ignore_eos": True} for i in range(9)]  # more than twice the cap of 4
    replies = in_threads([lambda b=b: post_ok(batched_url, "/v1/completions", b) for b in bodies])
    assert len({r["id"] for r in replies}) == len(bodies)
    assert [r["usage"]["completion_tokens"] for r in replies] == [b["max_tokens"] for b in bodies]
    info = health(batched_url)
    assert info["max_num_seqs"] == 4
    assert info["threads"] == 1, "--threads did not reach the worker thread that runs the model"
    assert info["prepacked_weights"] == 30 * 7 + 1  # SmolLM2-135M: 7 linear layers in each of 30 blocks, lm_head


@pytest.mark.integration
def test_http_client_disconnect_removes_the_sequence(batched_url):
    body = {"prompt": "Write a very long story:", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    ended = scrape(batched_url)["llmload:request_success_total"]
    sock = open_raw_request(batched_url, "/v1/completions", body)
    read_until_events(sock, 3)  # it is decoding now
    assert health(batched_url)["running"] == 1
    sock.close()
    deadline = time.monotonic() + 20
    while health(batched_url)["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert health(batched_url)["running"] == 0
    # no token after that: the server's own counters stand still, and it counted the request as aborted
    produced = scrape(batched_url)["llmload:generation_tokens_total"]
    time.sleep(0.5)
    after = scrape(batched_url)
    assert after["llmload:generation_tokens_total"] == produced < 1000
    assert after["llmload:request_success_total"] == ended + 1


@pytest.mark.integration
def test_http_metrics_show_the_batch(batched_url):
    """/metrics under 6 requests with a cap of 4: up to 4 run, the others wait, the KV cache fills and empties."""
    body = {"prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True, "temperature": 0}
    done = []
    calls = [lambda: done.append(post_ok(batched_url, "/v1/completions", body)) for _ in range(6)]
    runner = threading.Thread(target=in_threads, args=(calls,))
    runner.start()
    seen = sample_while(batched_url, lambda: len(done) < 6 and runner.is_alive(), 120)
    runner.join(120)
    assert len(done) == 6
    running = [s["llmload:num_requests_running"] for s in seen]
    waiting = [s["llmload:num_requests_waiting"] for s in seen]
    usage = [s["llmload:kv_cache_usage_perc"] for s in seen]
    assert 1 < max(running) <= 4 and max(waiting) > 0, (running, waiting)
    # At most 4 sequences of a few prompt tokens + 24 over 4 x 2048 positions: small, but above zero.
    assert 0 < max(usage) <= 4 * (16 + 24) / (4 * 2048), usage
    after = scrape(batched_url)
    assert [after[f"llmload:{n}"] for n in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")] \
        == [0, 0, 0]


@pytest.mark.unit
def test_cli_rejects_a_batch_cap_below_one(capsys):
    from server.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--engine", "batched", "--max-num-seqs", "0"])
    assert exit_info.value.code == 2
    assert "argument --max-num-seqs: '0' is not an integer >= 1" in capsys.readouterr().err
