"""One generation request end to end: send, read, interpret, and return a RequestResult whatever happens.

:class:`LLMClient` joins the transport (socket, line timing) and the wire format
(what the lines mean). It never raises for a failed request: a refused
connection, an HTTP error, a time-out, a malformed or truncated stream all come
back as ``RequestResult(success=False, error=...)`` with a one-line message.

Tokens per chunk: where the server gives no running token count, a
``chunk_counter`` (a tokenizer's batch count, e.g.
:meth:`llmload.tasks.tokens.TokenCounter.text_tokens`) counts each output
chunk's text once the answer is complete, off the timed path; without one the
chunks stay uncounted (ITL per chunk, see :mod:`llmload.core.wire`).

Identity: every generation request carries ``X-Request-Id: <request_id>`` and
a W3C ``traceparent: 00-<request_id>-<span_id>-01`` (the request id, 32 hex
digits, is its trace id; ``span_id``, 16 random hex digits, the client's
span), so the server's logs, traces and ids name the request the raw log
does. The server's own per-request timing, where its answer carries one,
comes back in ``server_timing`` (:func:`llmload.core.wire.read_server_timing`).

Timing: ``start_time`` is ``time.time()`` and ``t0`` is ``time.perf_counter()``,
both taken right before the request is handed to the socket (the body is
encoded, the ids drawn and the headers made before); every offset is ``perf_counter() - t0`` at the moment the socket read that
delivered an event (stream) or the last of the body (sync) returned.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Sequence

import gevent

from llmload.core.apis import GenerationParams, build_body
from llmload.core.cancel import CancelPoint
from llmload.core.defaults import REQUEST_TIMEOUT_S
from llmload.core.metrics import CONNECTION, TIMED_OUT, UNREACHABLE, RequestResult
from llmload.core.records import PromptRecord
from llmload.core.retry import RetryPolicy
from llmload.core.transport import HTTPTransport, LineResponse, TransportError
from llmload.core.wire import (
    MODELS_PATH,
    SERVER_REPORTED,
    Outcome,
    ServerReported,
    StreamReader,
    WireError,
    encode_body,
    first_model_id,
    http_error_message,
    read_body,
)



class RequestTimeout(Exception):
    """Raised by the client's own gevent.Timeout (a distinct class, so no other timeout is mistaken for it)."""


class Cancelled(Exception):
    """Raised by the cancel point's own timer: the client abandons the request now."""


class CancelTimer:
    """Abandons a request at its :class:`CancelPoint`: a timer from the send or from the first output chunk, or a
    count of the output tokens read so far (:meth:`due`)."""

    def __init__(self, point: CancelPoint | None):
        self.point = point
        self._timer: gevent.Timeout | None = None

    def sent(self) -> None:
        if self.point is not None and self.point.kind == "send":
            self._timer = gevent.Timeout.start_new(self.point.value, Cancelled)

    @property
    def watches_stream(self) -> bool:
        """Whether :meth:`due` has anything to do with a stream's pieces (a token count, or a ``ttft+`` timer)."""
        return self.point is not None and self.point.kind != "send"

    def due(self, reader: StreamReader, arrived: float) -> bool:
        """After each piece of a stream: True once the token count is reached; starts the ``ttft+`` timer."""
        point = self.point
        if point is None or not reader.token_offsets:
            return False
        if point.kind == "tokens":
            running = reader.running[-1]  # recorded with each token offset
            return (running if running is not None else len(reader.token_offsets)) >= point.value
        if point.kind == "ttft" and self._timer is None:
            self._timer = gevent.Timeout.start_new(max(arrived + point.value - time.perf_counter(), 0.0),
                                                   Cancelled)
        return False

    def close(self) -> None:
        if self._timer is not None:
            self._timer.close()


@dataclass
class Attempt:
    """One send of a request and what came of it (:meth:`LLMClient.generate` may make several)."""

    status: int = 0
    outcome: Outcome = field(default_factory=Outcome)
    end: float = field(default_factory=time.perf_counter)  # perf_counter time it ended
    cancelled: bool = False
    retry_after: str = ""  # the answer's Retry-After header


class LLMClient:
    """Sends generation requests for one task through ``transport``; see the module docstring."""

    def __init__(self, transport: HTTPTransport, params: GenerationParams, task: str,
                 timeout: float = REQUEST_TIMEOUT_S, worker: str = "",
                 chunk_counter: Callable[[Sequence[str]], list[int]] | None = None,
                 retry: RetryPolicy | None = None):
        self.transport = transport
        self.params = params
        self.task = task
        self.timeout = timeout
        self.worker = worker
        self.chunk_counter = chunk_counter
        self.retry = retry  # --retry: a 429 or 503 answer is sent again (llmload.core.retry)

    def list_first_model(self, timeout: float | None = None) -> str:
        """The first model id the server lists at ``/v1/models`` (raises TransportError/WireError)."""
        timeout = timeout or self.timeout
        with gevent.Timeout(timeout, RequestTimeout):
            try:
                response = self.transport.send("GET", MODELS_PATH)
                body, _ = response.read()
                response.close()
            except RequestTimeout:
                raise TransportError(f"{MODELS_PATH} did not answer within {timeout:g} s") from None
        if response.status_code != 200:
            raise WireError(f"{MODELS_PATH}: {http_error_message(response.status_code, body)}")
        return first_model_id(body)

    def failed(self, record: PromptRecord, error: str, flags: list[str] | None = None) -> RequestResult:
        """A RequestResult for a request that could not be sent (e.g. no model to ask for)."""
        return RequestResult(request_id=uuid.uuid4().hex, task=self.task, api=self.params.api,
                             mode=self.params.mode, start_time=time.time(), end_offset=0.0, success=False,
                             error=error, prompt_id=record.id, worker=self.worker, flags=list(flags or ()))

    def generate(self, record: PromptRecord, model: str, messages: list[dict] | None = None,
                 cancel: CancelPoint | None = None) -> RequestResult:
        """Send ``record`` (or, for chat, ``messages`` in its place) to ``model``; measure and return the result.

        ``cancel``: close the connection at that point (the result is ``cancelled``, with what arrived until then),
        unless the answer is complete first.

        With a retry policy, a 429 or 503 answer is sent again after its wait (:mod:`llmload.core.retry`), the
        same request (same id) each time: the result is the last attempt's, its offsets from the first send, the
        earlier attempts in ``retries``. The waits and the attempts count against the one ``--timeout``, and a
        cancel point counts from the first send."""
        payload = encode_body(build_body(record, self.params, model, messages))
        path = self.params.path
        request_id, span_id = uuid.uuid4().hex, os.urandom(8).hex()
        headers = self.transport.request_headers(
            "text/event-stream" if self.params.stream else "application/json",
            {"X-Request-Id": request_id, "traceparent": f"00-{request_id}-{span_id}-01"})
        timer = CancelTimer(cancel)
        retries: list[dict] = []
        attempt = Attempt()
        start_time = time.time()
        t0 = time.perf_counter()
        try:
            with gevent.Timeout(self.timeout, RequestTimeout):
                timer.sent()
                while True:
                    self._attempt(path, payload, headers, t0, timer, attempt)
                    wait, why_not = (None, "") if self.retry is None or attempt.cancelled else \
                        self.retry.wait(attempt.status, attempt.retry_after, len(retries))
                    if wait is not None and attempt.end + wait >= t0 + self.timeout:
                        wait, why_not = None, f"not retried: its wait ({wait:.1f} s) would pass --timeout"
                    if wait is None:
                        if why_not:
                            attempt.outcome.error = f"{attempt.outcome.error} ({why_not})"
                        break
                    retries.append({"status": attempt.status, "error": attempt.outcome.error,
                                    "end": attempt.end - t0, "wait": wait})
                    attempt = Attempt()
                    gevent.sleep(wait)  # this user waits; the others go on
        except Cancelled:  # before the stream (or the whole sync body) came, or while waiting to retry
            attempt.end, attempt.outcome, attempt.cancelled = time.perf_counter(), Outcome(), True
        except RequestTimeout:
            attempt.end = time.perf_counter()
            attempt.outcome = Outcome(error=f"timed out after {self.timeout:g} s (--timeout)", flags=[TIMED_OUT])
        finally:
            timer.close()
        outcome, end, status, cancelled = attempt.outcome, attempt.end, attempt.status, attempt.cancelled
        if outcome.chunk_tokens_source == "chunks" and self.chunk_counter is not None:
            outcome.count_chunks(self.chunk_counter(outcome.chunk_texts))
        return RequestResult(
            request_id=request_id, task=self.task, api=self.params.api, mode=self.params.mode,
            start_time=start_time, end_offset=end - t0,
            token_offsets=outcome.token_offsets,
            output_tokens=outcome.output_tokens, output_tokens_source=outcome.output_tokens_source,
            prompt_tokens=outcome.prompt_tokens, success=outcome.success and not cancelled, status_code=status,
            error=outcome.error, prompt_id=record.id, worker=self.worker, output_chars=outcome.output_chars,
            output_text=outcome.output_text, flags=outcome.flags, first_output_offset=outcome.first_output_offset,
            reasoning_tokens=outcome.reasoning_tokens, reasoning_text=outcome.reasoning_text,
            tool_calls=outcome.tool_calls, chunk_tokens=outcome.chunk_tokens,
            chunk_tokens_source=outcome.chunk_tokens_source, cancelled=cancelled,
            cancel_after=cancel.describe() if cancel is not None else "", span_id=span_id,
            server_timing=outcome.server_timing, retries=retries)

    def _attempt(self, path: str, payload: bytes, headers: dict, t0: float, timer: CancelTimer,
                 attempt: Attempt) -> None:
        """Send once and read the answer into ``attempt`` (its status as soon as it is known, so that a time-out
        keeps it). Cancelled and RequestTimeout pass through; a failed connection is an outcome."""
        response: LineResponse | None = None
        try:
            response = self.transport.send("POST", path, payload, headers=headers)
            attempt.status = status = response.status_code
            if status != 200:
                body, attempt.end = response.read()
                attempt.outcome = Outcome(error=http_error_message(status, body, path))
                attempt.retry_after = response.retry_after
            elif self.params.stream:
                attempt.outcome, attempt.end, attempt.cancelled = self._read_stream(response, t0, timer)
            else:
                body, attempt.end = response.read()
                attempt.outcome = read_body(self.params.style, body)
        except TransportError as exc:
            attempt.end = time.perf_counter()
            attempt.outcome = Outcome(error=str(exc), flags=[UNREACHABLE if exc.unreachable else CONNECTION])
        finally:
            if response is not None:
                response.close()  # a cancelled response is not complete: its socket is closed

    def _read_stream(self, response: LineResponse, t0: float,
                     timer: CancelTimer) -> tuple[Outcome, float, bool]:
        """Read an SSE body to its end or its cancel point; return the outcome, the ``perf_counter`` time the stream
        ended and whether the client cancelled it (the outcome then holds what arrived, and no error)."""
        reader = StreamReader(self.params.style)
        end = time.perf_counter()
        watch = timer.watches_stream  # looked up once: the per-read work stays as it was without a cancel point
        try:
            for piece, arrived in response.reads():
                end = arrived
                if reader.feed(piece, arrived - t0):
                    break
                if watch and timer.due(reader, arrived):
                    raise Cancelled
            else:
                reader.end()
        except Cancelled:
            outcome = reader.outcome()
            outcome.error = ""
            return outcome, time.perf_counter(), True
        except WireError as exc:
            outcome = reader.outcome()
            outcome.error = str(exc)
            if isinstance(exc, ServerReported):
                outcome.flags.append(SERVER_REPORTED)
            return outcome, time.perf_counter(), False
        except TransportError as exc:
            outcome = reader.outcome()
            outcome.error = f"{exc} (mid-stream)"
            outcome.flags.append(UNREACHABLE if exc.unreachable else CONNECTION)
            return outcome, time.perf_counter(), False
        if reader.done:
            timer.close()  # complete: nothing to cancel any more
            self._drain(response)
        outcome = reader.outcome()
        if not outcome.success and "text/event-stream" not in response.content_type:
            outcome.error = (f"expected an SSE stream (text/event-stream), got Content-Type "
                             f"{response.content_type or 'none'}: {outcome.error}")
        return outcome, end, False

    @staticmethod
    def _drain(response: LineResponse) -> None:
        """Read what follows ``[DONE]`` (normally only the chunked-encoding end) to keep the connection."""
        try:
            for _ in response.reads():
                pass
        except TransportError:
            pass  # the answer is complete; a connection that fails now is simply not reused
