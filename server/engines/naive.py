"""The naive engine: the seed's basic serving script behind the engine interface.

One worker thread generates one request at a time with a plain KV-cached decode
loop; the other requests wait in arrival order. It is the baseline the
comparison measures: its throughput cannot grow with concurrency.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from typing import TYPE_CHECKING, AsyncIterator

from server.engines.base import (Engine, EngineLoad, GenerationDelta, GenerationJob, PreparedPrompt, RequestTiming,
                                 SamplingParams)
from server.engines.hf_model import HFModel
from server.engines.sequence import Decoding

if TYPE_CHECKING:
    from transformers import DynamicCache

log = logging.getLogger(__name__)


class NaiveEngine(Engine):
    """transformers, batch size 1, first come first served."""

    name = "naive"

    def __init__(self, model: str, served_model_name: str, max_model_len: int | None = None,
                 dtype: str = "auto", threads: int | None = None):
        super().__init__(model, served_model_name, max_model_len)
        self.hf = HFModel(model, dtype=dtype, max_model_len=max_model_len, threads=threads)
        self._jobs: queue.Queue[GenerationJob | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self.worker_threads: int | None = None  # torch threads in effect where the model runs (``/health``)
        self._active_len = 0  # positions (prompt + output) of the request generating now; 0 when idle

    def start(self) -> None:
        self.hf.load()
        self.max_model_len = self.hf.max_model_len
        self._worker = threading.Thread(target=self._run, name="naive-engine", daemon=True)
        self._worker.start()

    def stop(self) -> None:
        if self._worker is not None:
            self._jobs.put(None)
            self._worker.join(timeout=10)
            self._worker = None

    def prepare_completion(self, prompt: str) -> PreparedPrompt:
        return self.hf.prepare_completion(prompt)

    def prepare_chat(self, messages: list[dict]) -> PreparedPrompt:
        return self.hf.prepare_chat(messages)

    async def generate(self, request_id: str, prompt: PreparedPrompt, params: SamplingParams,
                       timing: RequestTiming | None = None) -> AsyncIterator[GenerationDelta]:
        job = GenerationJob(request_id or uuid.uuid4().hex, prompt, params, asyncio.get_running_loop(),
                            timing if timing is not None else RequestTiming())
        job.timing.mark_queued()
        self._jobs.put(job)
        try:
            async for delta in job.deltas():
                yield delta
        finally:
            job.cancelled.set()  # no-op when finished; stops the worker at its next step otherwise

    def load(self) -> EngineLoad:
        """At most one request generates, the others wait in the queue; KV use is its length over the context."""
        active = self._active_len
        return EngineLoad(running=1 if active else 0, waiting=self._jobs.qsize(),
                          kv_cache_usage=min(1.0, active / self.max_model_len))

    def info(self) -> dict:
        """``/health``: the engine's fields and the torch threads its worker computes with."""
        return {**super().info(), "threads": self.worker_threads}

    # ------------------------------------------------------------------ worker thread

    def _start_worker_thread(self) -> None:
        """Apply ``--threads`` in the worker thread itself and record what is in effect there."""
        import torch

        self.hf.apply_threads()
        self.worker_threads = torch.get_num_threads()

    def _run(self) -> None:
        self._start_worker_thread()
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.cancelled.is_set():
                log.info("request %s cancelled while it waited in the queue", job.request_id)
                continue
            try:
                self._generate(job)
            except Exception as exc:  # report to the request, keep serving the others
                log.exception("generation failed for %s", job.request_id)
                job.emit(exc)
            finally:
                self._active_len = 0

    def _prefill(self, job: GenerationJob) -> tuple[Decoding, DynamicCache]:
        """Start a request: run its prompt alone from an empty cache and hand out its first token.

        Returns its :class:`Decoding` and its KV cache (a ``DynamicCache``). Both
        engines start every request here; they differ only in how they decode.
        """
        import torch
        from transformers import DynamicCache

        hf = self.hf
        job.timing.mark_scheduled()
        decoding = Decoding(job, hf.tokenizer, hf.eos_token_ids)
        out = hf.model(input_ids=torch.tensor([job.prompt.token_ids], dtype=torch.long),
                       past_key_values=DynamicCache(), use_cache=True, logits_to_keep=1)
        decoding.push(out.logits[0, -1])
        return decoding, out.past_key_values

    def _generate(self, job: GenerationJob) -> None:
        import torch

        prompt_len = len(job.prompt.token_ids)
        self._active_len = prompt_len
        with torch.inference_mode():
            decoding, cache = self._prefill(job)
            while not decoding.done:
                self._active_len = prompt_len + len(decoding.state.token_ids)
                out = self.hf.model(input_ids=torch.tensor([[decoding.last_token]], dtype=torch.long),
                                    past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                decoding.push(out.logits[0, -1])
        if not decoding.state.finished:
            log.info("request %s cancelled after %d tokens", job.request_id, len(decoding.state.token_ids))
