"""The engine interface every serving engine implements, and the job plumbing they share.

An engine turns a prepared prompt and sampling settings into a stream of
:class:`GenerationDelta` (new text, tokens so far, finish reason). The HTTP
layer never knows which engine it talks to. Engines that compute on a worker
thread (the naive and batched engines) push deltas through a
:class:`GenerationJob`, which bridges the thread to the asyncio event loop and
carries the cancellation flag set when a client goes away. Every engine stamps
the same :class:`RequestTiming` as a request passes its stages; the HTTP layer
turns it into the per-request ``metrics`` (:meth:`RequestTiming.metrics_ms`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import AsyncIterator, Literal

from llmload.core.defaults import MAX_MODEL_LEN

FinishReason = Literal["stop", "length"]


class PromptTooLong(ValueError):
    """The prompt plus the requested output does not fit the model's context."""


@dataclass(frozen=True)
class SamplingParams:
    """Per-request generation settings (already validated by the HTTP layer)."""

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False
    min_tokens: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class PreparedPrompt:
    """A prompt as the engine will see it: the final text and its token ids."""

    text: str
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class GenerationDelta:
    """One step of output: answer text new since the last delta, tokens generated so far (reasoning included),
    finish reason, and reasoning text new since the last delta with the reasoning tokens so far."""

    text: str
    completion_tokens: int
    finish_reason: FinishReason | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0


@dataclass(frozen=True)
class EngineLoad:
    """What an engine holds now: requests generating, requests waiting, and its KV cache's use (0..1).

    ``kv_cache_usage`` is None for an engine without a KV cache (the mock).
    """

    running: int
    waiting: int
    kv_cache_usage: float | None = None


@dataclass
class RequestTiming:
    """When one request passed each stage, in ``time.monotonic()`` seconds (None: not reached).

    ``received`` is stamped by the HTTP layer (its handler starts on the parsed
    request); the engine stamps the rest: ``queued`` when :meth:`Engine.generate`
    takes the request, ``scheduled`` when the engine starts it (the worker starts
    its prefill; the mock: its slot is free), and ``first_token`` / ``last_token``
    as tokens are produced (before the delta that carries them is handed out).
    """

    received: float | None = None
    queued: float | None = None
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None

    def mark_queued(self) -> None:
        self.queued = time.monotonic()

    def mark_scheduled(self) -> None:
        self.scheduled = time.monotonic()

    def mark_token(self) -> None:
        """A token (or a chunk of tokens sent together) was produced now."""
        now = time.monotonic()
        if self.first_token is None:
            self.first_token = now
        self.last_token = now

    def metrics_ms(self, tokens: int) -> dict[str, float | None]:
        """vLLM's per-request timing metrics (``build_per_request_timing_metrics``), their formulas and names, for
        ``tokens`` generated tokens, plus ``frontend_time_ms`` (received -> queued); None where a stamp is missing."""

        def span(start: float | None, end: float | None) -> float | None:
            return None if start is None or end is None else (end - start) * 1000.0

        decode = span(self.first_token, self.last_token)
        inference = span(self.scheduled, self.last_token)
        return {
            "time_to_first_token_ms": span(self.scheduled, self.first_token),
            "generation_time_ms": decode,
            "queue_time_ms": span(self.queued, self.scheduled),
            "mean_itl_ms": decode / (tokens - 1) if decode is not None and tokens > 1 else None,
            "tokens_per_second": tokens / inference * 1000.0 if inference is not None and inference > 0 else None,
            "frontend_time_ms": span(self.received, self.queued),
        }


@dataclass
class GenerationJob:
    """One request in flight: its inputs, its output queue, its cancellation flag and its timing."""

    request_id: str
    prompt: PreparedPrompt
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    timing: RequestTiming = field(default_factory=RequestTiming)
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, item: GenerationDelta | BaseException) -> None:
        """Hand a delta (or an error) to the waiting coroutine; safe from any thread."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            self.cancelled.set()

    async def deltas(self) -> AsyncIterator[GenerationDelta]:
        """Yield deltas until the finishing one; re-raise an engine error."""
        while True:
            item = await self.queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.finish_reason is not None:
                return


class Engine(ABC):
    """A serving engine: prompt preparation plus asynchronous, cancellable generation."""

    #: Name used in ``--engine`` and in ``/health``.
    name: str = "engine"
    #: Whether its deltas carry reasoning (then usage reports reasoning tokens, as vLLM's does with a reasoning
    #: parser), and the chat delta field that carries it: ``reasoning`` (vLLM's) or ``reasoning_content``.
    reasons: bool = False
    reasoning_field: str = "reasoning"

    def __init__(self, model: str, served_model_name: str, max_model_len: int | None = None):
        self.model = model
        self.served_model_name = served_model_name
        self._max_model_len_setting = max_model_len
        self.max_model_len: int = max_model_len or MAX_MODEL_LEN

    @abstractmethod
    def start(self) -> None:
        """Load the model and start workers (called once, at server start-up)."""

    def stop(self) -> None:
        """Stop workers and free resources (called at shutdown)."""

    @abstractmethod
    def prepare_completion(self, prompt: str) -> PreparedPrompt:
        """Tokenise a completion-style prompt."""

    @abstractmethod
    def prepare_chat(self, messages: list[dict]) -> PreparedPrompt:
        """Render chat messages with the model's chat template and tokenise them."""

    @abstractmethod
    async def generate(self, request_id: str, prompt: PreparedPrompt, params: SamplingParams,
                       timing: RequestTiming | None = None) -> AsyncIterator[GenerationDelta]:
        """Stream the generation of ``prompt``, stamping ``timing`` as it goes (see :class:`RequestTiming`); closing
        the iterator cancels it at once."""
        yield GenerationDelta("", 0)  # pragma: no cover - for type checkers

    def check_fits(self, prompt: PreparedPrompt, max_tokens: int | None) -> int:
        """Return the output budget, or raise :class:`PromptTooLong` as vLLM words it."""
        prompt_len = len(prompt.token_ids)
        room = self.max_model_len - prompt_len
        if max_tokens is None:
            if room < 1:
                raise PromptTooLong(
                    f"This model's maximum context length is {self.max_model_len} tokens. However, your "
                    f"prompt has {prompt_len} tokens, which leaves no room for the completion.")
            return room
        if prompt_len + max_tokens > self.max_model_len:
            raise PromptTooLong(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} in the completion). "
                f"Please reduce the length of the prompt or of max_tokens.")
        return max_tokens

    @abstractmethod
    def load(self) -> EngineLoad:
        """Requests running and waiting now, and the KV cache's use (``/metrics``, ``/health``); any thread."""

    def info(self) -> dict:
        """What ``/health`` reports about the engine."""
        load = self.load()
        return {"engine": self.name, "model": self.served_model_name, "max_model_len": self.max_model_len,
                "running": load.running, "waiting": load.waiting}
