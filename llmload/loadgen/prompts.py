"""What each request sends: the next prompt record of a task (or of a ``--trace``), and the model (``--model`` or
the server's first)."""

from __future__ import annotations

import itertools
import json
import logging
import random
from pathlib import Path

import gevent
from gevent.event import AsyncResult

from llmload.core.model_store import resolve_model
from llmload.core.records import PromptRecord, load_prompts
from llmload.core.transport import TransportError
from llmload.core.wire import WireError
from llmload.tasks.traces import TracePrompts, offsets, read_trace

log = logging.getLogger("llmload")


class Prompts:
    """Each task's prompt file, read once, handed out in file order and cycling from ``start_index``'s place
    (a worker's index: workers start at different places)."""

    def __init__(self):
        self._records: dict[Path, list[PromptRecord]] = {}
        self._cursors: dict[str, itertools.count] = {}

    def records(self, path: Path) -> list[PromptRecord]:
        if path not in self._records:
            self._records[path] = load_prompts(path)
        return self._records[path]

    def next(self, task: str, path: Path, start_index: int = 0) -> PromptRecord:
        records = self.records(path)
        if task not in self._cursors:
            start = random.Random(start_index).randrange(len(records)) if start_index else 0
            self._cursors[task] = itertools.count(start)
        return records[next(self._cursors[task]) % len(records)]


def context_of(model: str) -> int | None:
    """A local model folder's context (``max_position_embeddings`` of its config.json); None when unknown."""
    try:
        value = json.loads((Path(model) / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class TraceReplay:
    """A ``--trace``'s requests in the replay window, when each is due, and each one's prompt (built when sent).

    Every process builds the same prompts from the same file, tokenizer and
    seed, so a worker sends ticket ``k``'s request as the master scheduled it.
    """

    def __init__(self, settings):
        from llmload.tasks.tokens import TokenCounter  # transformers: only with --trace

        trace = read_trace(settings.trace, settings.trace_format)
        self.requests = trace.window(settings.trace_start, settings.trace_duration)
        if settings.requests:
            self.requests = self.requests[:settings.requests]
        self.offsets = offsets(self.requests, settings.trace_start, settings.time_scale)
        model = settings.tokenizer or resolve_model(None)
        counter = TokenCounter.load(model)
        self.prompts = TracePrompts(counter, settings.trace_block_size, settings.seed)
        self.prompts.check(trace.path, self.requests, settings.api, settings.max_model_len or context_of(model))

    @staticmethod
    def key_of(settings) -> tuple:
        """The options the replay was built from (a worker builds it again when the master's differ)."""
        return (settings.trace, settings.trace_format, settings.trace_start, settings.trace_duration,
                settings.time_scale, settings.trace_block_size, settings.seed, settings.tokenizer, settings.api,
                settings.max_model_len, settings.requests)

    def record(self, index: int) -> PromptRecord:
        """The prompt of the trace's ``index``-th request in the window."""
        return self.prompts.record(self.requests[index])


class ModelLookup:
    """The server's first listed model, looked up once per process (every user waits for the same look-up; a
    failed one is tried again by the next user)."""

    def __init__(self):
        self._model = AsyncResult()
        self._lookup: gevent.Greenlet | None = None

    def resolve(self, client, timeout: float) -> tuple[str, str, bool]:
        """``(model, error, unreachable)`` within ``timeout`` seconds."""
        if not self._model.ready() and self._lookup is None:
            self._lookup = gevent.spawn(self._look_up, client, timeout)
        try:
            model = self._model.get(timeout=timeout + 1.0)
        except gevent.Timeout:
            return "", f"cannot find the model to use: /v1/models did not answer within {timeout:g} s (pass " \
                       "--model to skip the look-up)", False
        except (TransportError, WireError) as exc:
            return "", f"cannot find the model to use: {exc} (pass --model to skip the look-up)", \
                getattr(exc, "unreachable", False)
        return model, "", False

    @property
    def known(self) -> str:
        """The model looked up, or '' before (or without) a successful look-up."""
        return self._model.value if self._model.successful() else ""

    def _look_up(self, client, timeout: float) -> None:
        try:
            model = client.list_first_model(timeout)
        except (TransportError, WireError) as exc:
            failed, self._model = self._model, AsyncResult()
            self._lookup = None  # the next user tries again
            failed.set_exception(exc)
            return
        log.info(f"llmload: using model {model!r} (the first listed at /v1/models)")
        self._model.set(model)
