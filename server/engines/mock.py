"""The mock engine: no model, tokens on a fixed schedule.

It serves any number of requests at once and emits each token at a known time:
the first after ``ttft_ms``, then one every ``itl_ms``, scheduled from the
request's arrival so that delays never drift. Tests and the load-generator
calibration compare what the Locust suite measures against these known timings.
With ``speed_period_ms`` its speed changes every period of wall-clock time by a
seeded lognormal factor (a server whose batches make it faster and slower): each
delay is scaled by the factor of the period it starts in, so figures correlate
over time within a run (the coverage benchmark's test case; with ``slots`` a
slot is held for the constant-speed service time).
Tokens are words (`` w0 w1 ...``); the prompt's token count is its word count.

Options: the first ``reasoning_tokens`` tokens of an answer are reasoning
(words of :data:`MOCK_REASONING_WORDS`, within ``max_tokens``, as a reasoning
model's budget counts them); ``tokens_per_chunk`` tokens go out together, each
group when its last token is due.

With ``slots`` K > 0 it is a server of known capacity: at most K requests
generate at once and the others wait, first come first served. Each slot keeps
the time its current request's schedule ends; an arriving request takes the
slot that frees first and starts at that time (or at once), so every request
holds a slot for exactly its service time S = ttft + (max_tokens - 1) x itl,
with no drift from the event loop, and with constant arrivals of one length
the server holds exactly K / S requests/s (the runner's capacity test). A
request cancelled while it waits keeps its slot until its scheduled end.

Its :class:`~server.engines.base.RequestTiming` is measured as on the real
engines, each stage stamped when the event loop actually reaches it: queued at
arrival, scheduled when its slot is free (at once without slots), a token when
its chunk goes out. With one token per chunk at constant speed the figures
are the schedule's up to the event loop's lateness: queue time its wait for a
slot, time to first token ``ttft_ms``, generation time
``(max_tokens - 1) x itl_ms`` (``tests/server/test_server_timing.py``).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from typing import AsyncIterator

from server.engines.base import Engine, EngineLoad, GenerationDelta, PreparedPrompt, RequestTiming, SamplingParams
from server.engines.hf_model import render_plain_chat

MOCK_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs", "far")
MOCK_REASONING_WORDS = ("hmm", "let", "me", "think")


class MockEngine(Engine):
    """Deterministic timings, exactly ``max_tokens`` tokens per request; unlimited concurrency, or ``slots``."""

    name = "mock"

    def __init__(self, model: str, served_model_name: str, max_model_len: int | None = None,
                 ttft_ms: float = 200.0, itl_ms: float = 20.0, reasoning_tokens: int = 0,
                 reasoning_field: str = "reasoning", tokens_per_chunk: int = 1, slots: int = 0,
                 speed_period_ms: float = 0.0, speed_sd: float = 0.3, speed_seed: int = 0):
        super().__init__(model, served_model_name, max_model_len)
        self.ttft = ttft_ms / 1000.0
        self.itl = itl_ms / 1000.0
        self.reasoning_tokens = reasoning_tokens
        self.reasons = reasoning_tokens > 0
        self.reasoning_field = reasoning_field
        self.tokens_per_chunk = tokens_per_chunk
        self.running = 0  # generations in flight (``/health``), so tests can see a cancellation
        self.slots = slots  # 0: no limit
        self.waiting = 0  # requests queued for a slot
        self._free_at = [0.0] * slots  # per slot: when its last scheduled request ends (monotonic seconds)
        self.speed_period = speed_period_ms / 1000.0
        self.speed_sd, self.speed_seed = speed_sd, speed_seed
        self.wall_offset = time.time() - time.monotonic()

    def slowdown(self, at: float) -> float:
        """The delay factor of the period holding ``at`` (monotonic): 1, or a lognormal draw seeded by the seed
        and the period's index in wall-clock time (servers started apart see one sequence)."""
        if not self.speed_period:
            return 1.0
        period = int((at + self.wall_offset) / self.speed_period)
        return math.exp(self.speed_sd * random.Random(f"{self.speed_seed}:{period}").gauss(0.0, 1.0))

    def start(self) -> None:
        pass

    @staticmethod
    def _prepare(text: str) -> PreparedPrompt:
        return PreparedPrompt(text=text, token_ids=tuple(range(max(1, len(text.split())))))

    def prepare_completion(self, prompt: str) -> PreparedPrompt:
        return self._prepare(prompt)

    def prepare_chat(self, messages: list[dict]) -> PreparedPrompt:
        return self._prepare(render_plain_chat(messages))

    async def generate(self, request_id: str, prompt: PreparedPrompt, params: SamplingParams,
                       timing: RequestTiming | None = None) -> AsyncIterator[GenerationDelta]:
        timing = timing if timing is not None else RequestTiming()
        timing.mark_queued()
        start = timing.queued
        if self.slots:
            slot = min(range(self.slots), key=self._free_at.__getitem__)
            start = max(start, self._free_at[slot])
            self._free_at[slot] = start + self.ttft + max(0, params.max_tokens - 1) * self.itl
            delay = start - time.monotonic()
            if delay > 0:
                self.waiting += 1
                try:
                    await asyncio.sleep(delay)
                finally:
                    self.waiting -= 1
        timing.mark_scheduled()
        self.running += 1
        total, thinking = params.max_tokens, min(self.reasoning_tokens, params.max_tokens)
        try:
            due, scheduled = start + self.ttft * self.slowdown(start), 0  # when token `scheduled` is due
            for first in range(0, total, self.tokens_per_chunk):
                last = min(first + self.tokens_per_chunk, total) - 1  # the chunk goes out when its last token is due
                for _ in range(scheduled, last):
                    due += self.itl * self.slowdown(due)
                scheduled = last
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                timing.mark_token()
                tokens = range(first, last + 1)
                yield GenerationDelta(
                    text="".join(" " + MOCK_WORDS[(i - thinking) % len(MOCK_WORDS)] for i in tokens if i >= thinking),
                    completion_tokens=last + 1, finish_reason="length" if last == total - 1 else None,
                    reasoning="".join(" " + MOCK_REASONING_WORDS[i % len(MOCK_REASONING_WORDS)]
                                      for i in tokens if i < thinking),
                    reasoning_tokens=min(last + 1, thinking))
        finally:
            self.running -= 1

    def load(self) -> EngineLoad:
        """Requests generating and (with slots) queued; there is no KV cache."""
        return EngineLoad(running=self.running, waiting=self.waiting)

    def info(self) -> dict:
        info = {**super().info(), "ttft_ms": self.ttft * 1000, "itl_ms": self.itl * 1000,
                "reasoning_tokens": self.reasoning_tokens, "reasoning_field": self.reasoning_field,
                "tokens_per_chunk": self.tokens_per_chunk, "slots": self.slots}
        if self.speed_period:
            info.update(speed_period_ms=self.speed_period * 1000, speed_sd=self.speed_sd, speed_seed=self.speed_seed)
        return info
