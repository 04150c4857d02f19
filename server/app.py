"""HTTP layer: the OpenAI-compatible routes and the app factory.

``uvicorn server.app:app`` serves :data:`app`, built from ``LLMLOAD_*``
environment variables; ``python -m server`` builds one from its flags. The
engine (and so the model) is created and loaded at start-up, never at import.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from llmload.core.sse import DONE_SENTINEL, format_event
from server.engines import create_engine
from server.errors import APIError, ClientDisconnected, error_response, install_error_handlers
from server.limits import RequestLimits
from server.metrics import ServerMetrics
from server.engines.base import Engine, GenerationDelta, PreparedPrompt, PromptTooLong, RequestTiming, SamplingParams
from server.protocol import (
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    ChatResponseMessage,
    CompletionChoice,
    CompletionChunk,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamChoice,
    CompletionTokensDetails,
    ContentPartEvent,
    DeltaMessage,
    ErrorInfo,
    ErrorResponse,
    IncompleteDetails,
    ModelCard,
    ModelList,
    OutputItemEvent,
    OutputMessage,
    OutputText,
    OutputTokensDetails,
    PerRequestMetrics,
    ReasoningItem,
    ReasoningText,
    ResponseError,
    ResponseLifecycleEvent,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
    SamplingFields,
    TextDeltaEvent,
    TextDoneEvent,
    UsageInfo,
)
from server.settings import ServerSettings

log = logging.getLogger("server")

DISCONNECT_POLL_S = 0.05
#: The longest ``X-Request-Id`` taken (vLLM takes any); its characters must be visible ASCII (no space).
MAX_REQUEST_ID_CHARS = 128
REQUEST_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_REQUEST_ID_CHARS}}}")


class APIKeyMiddleware:
    """Require ``Authorization: Bearer <key>`` on ``/v1/*``, as vLLM's ``--api-key`` does.

    A plain ASGI middleware on purpose: Starlette's ``BaseHTTPMiddleware`` hides the
    client's disconnect from the routes, so a non-streamed generation would keep
    running after its client left.
    """

    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1"):
            given = Headers(scope=scope).get("authorization", "").encode()
            if not hmac.compare_digest(given, self.expected):
                response = error_response(401, "Invalid or missing API key (send 'Authorization: Bearer <key>').",
                                          code="invalid_api_key")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class RequestIdMiddleware:
    """Give every request an id: its ``X-Request-Id`` header, else a fresh uuid4 hex; echo it in the answer's
    ``X-Request-Id`` header (as vLLM's ``--enable-request-id-headers``) and keep it in ``request.state.request_id``,
    where the routes take it for the response ``id``, as vLLM's ``_base_request_id`` does.

    An id over :data:`MAX_REQUEST_ID_CHARS` characters or with any character other
    than visible ASCII gets an OpenAI-shaped 400 (vLLM takes anything). A
    ``traceparent`` header is logged at debug level with the id, nothing more.
    """

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        given = headers.get("x-request-id")
        if given is not None and not REQUEST_ID.fullmatch(given):
            response = error_response(
                400, f"X-Request-Id must be 1 to {MAX_REQUEST_ID_CHARS} visible ASCII characters (no spaces or "
                     f"control characters); got {len(given)} characters.", code="invalid_request_id")
            await response(scope, receive, send)
            return
        request_id = given or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        if "traceparent" in headers:
            log.debug("request %s: traceparent %r", request_id, headers["traceparent"])

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)


# --------------------------------------------------------------------------- the three API styles


@dataclass
class Answer:
    """A generation run to its end: the answer text, the reasoning text, and the last delta."""

    text: str
    reasoning: str
    last: GenerationDelta


@dataclass(frozen=True)
class Exchange:
    """One request being answered: what every chunk repeats (``id``, ``created``, ``model``), the prompt, the
    request, the engine's reasoning format and the request's timing (read once the generation has ended)."""

    head: dict
    prompt: PreparedPrompt
    body: SamplingFields
    reasons: bool
    reasoning_field: str
    timing: RequestTiming

    def usage(self, delta: GenerationDelta) -> UsageInfo:
        prompt_tokens = len(self.prompt.token_ids)
        details = CompletionTokensDetails(reasoning_tokens=delta.reasoning_tokens) if self.reasons else None
        return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=delta.completion_tokens,
                         total_tokens=prompt_tokens + delta.completion_tokens, completion_tokens_details=details)

    def metrics(self, last: GenerationDelta) -> PerRequestMetrics:
        """The per-request timing of a finished generation whose last delta is ``last``."""
        return PerRequestMetrics(**self.timing.metrics_ms(last.completion_tokens))


@dataclass(frozen=True)
class APIStyle:
    """What differs between the endpoints; the rest is :func:`serve_generation`."""

    id_prefix: str  # with its separator: ``chatcmpl-``, ``resp_``
    #: The request field that holds the prompt (named by prompt errors).
    prompt_param: str
    prepare: Callable[[Engine, SamplingFields], PreparedPrompt]
    #: The non-streamed answer.
    respond: Callable[[Exchange, Answer], BaseModel]
    #: The SSE stream of a generation, event by event.
    events: Callable[[Exchange, AsyncIterator[GenerationDelta]], AsyncIterator[str]]


def _prepare_messages(engine: Engine, messages: list[dict], param: str) -> PreparedPrompt:
    try:
        return engine.prepare_chat(messages)
    except Exception as exc:  # e.g. a chat template that rejects the role order
        raise APIError(400, f"cannot apply the chat template: {exc}", param=param) from None


def _error_message(exc: Exception) -> str:
    log.exception("generation failed mid-stream")
    return f"generation failed: {type(exc).__name__}: {exc}"


# ------------------------------------------------------------ completions and chat: choices in chunks


def _chat_message(x: Exchange, answer: Answer) -> ChatResponseMessage:
    reasoning = {x.reasoning_field: answer.reasoning} if answer.reasoning else {}
    return ChatResponseMessage(content=answer.text, **reasoning)


def _chat_delta(x: Exchange, d: GenerationDelta) -> DeltaMessage:
    reasoning = {x.reasoning_field: d.reasoning} if d.reasoning else {}
    return DeltaMessage(content=d.text or None, **reasoning)


def _choice_events(chunk_type: type[BaseModel], stream_choice: Callable[[Exchange, GenerationDelta], BaseModel],
                   preamble: tuple[BaseModel, ...] = ()):
    """The SSE stream of a choices API: one chunk per delta, usage as asked, ``data: [DONE]``.

    The preamble (the chat role chunk) waits for the first token, as in vLLM:
    clients that time the first chunk with ``choices`` (``vllm bench serve``
    does) then measure the time to the first token, not to the request's
    acceptance. Chunks carry ``usage: null`` only when ``include_usage`` asks
    for the final usage chunk; with ``continuous_usage_stats`` too, every chunk
    carries the usage so far (vLLM's extension), the preamble's with 0 tokens.
    """

    async def events(x: Exchange, generation: AsyncIterator[GenerationDelta]) -> AsyncIterator[str]:
        options = x.body.stream_options
        include_usage = bool(options and options.include_usage)
        running = include_usage and bool(options.continuous_usage_stats)
        exclude = None if include_usage else {"usage"}

        def chunk(choices: list[BaseModel], usage: UsageInfo | None = None,
                  metrics: PerRequestMetrics | None = None) -> str:
            return format_event(chunk_type(**x.head, choices=choices, usage=usage, metrics=metrics)
                                .model_dump_json(exclude=exclude))

        last = GenerationDelta("", 0)
        waiting = list(preamble)
        try:
            async for delta in generation:
                for choice in waiting:
                    yield chunk([choice], x.usage(last) if running else None)
                waiting = []
                last = delta
                yield chunk([stream_choice(x, delta)], x.usage(delta) if running else None)
        except Exception as exc:  # engine failure after the headers went out
            info = ErrorInfo(message=_error_message(exc), type="internal_server_error")
            yield format_event(ErrorResponse(error=info).model_dump_json())
        else:
            for choice in waiting:  # a generation without any delta still answers in full
                yield chunk([choice], x.usage(last) if running else None)
            if include_usage:  # vLLM's per-request metrics ride on this final usage chunk
                yield chunk([], x.usage(last), x.metrics(last))
        yield format_event(DONE_SENTINEL)

    return events


COMPLETIONS = APIStyle(
    id_prefix="cmpl-", prompt_param="prompt",
    prepare=lambda engine, body: engine.prepare_completion(body.prompt),
    # completions have no reasoning field: reasoning is part of the text, as vLLM's /v1/completions sends it
    respond=lambda x, a: CompletionResponse(**x.head, usage=x.usage(a.last), metrics=x.metrics(a.last), choices=[
        CompletionChoice(text=a.reasoning + a.text, finish_reason=a.last.finish_reason)]),
    events=_choice_events(CompletionChunk, lambda x, d: CompletionStreamChoice(text=d.reasoning + d.text,
                                                                               finish_reason=d.finish_reason)),
)
CHAT = APIStyle(
    id_prefix="chatcmpl-", prompt_param="messages",
    prepare=lambda engine, body: _prepare_messages(
        engine, [{"role": m.role, "content": m.text()} for m in body.messages], "messages"),
    respond=lambda x, a: ChatCompletionResponse(**x.head, usage=x.usage(a.last), metrics=x.metrics(a.last), choices=[
        ChatCompletionChoice(message=_chat_message(x, a), finish_reason=a.last.finish_reason)]),
    events=_choice_events(ChatCompletionChunk, lambda x, d: ChatCompletionStreamChoice(
        delta=_chat_delta(x, d), finish_reason=d.finish_reason),
        # As vLLM does, the role chunk goes out with the first token.
        preamble=(ChatCompletionStreamChoice(delta=DeltaMessage(role="assistant", content="")),)),
)


# ------------------------------------------------------------ the Responses API: typed events


def _response(x: Exchange, status: str, output: list | None = None, usage: GenerationDelta | None = None,
              error: str = "") -> ResponseObject:
    body: ResponsesRequest = x.body  # type: ignore[assignment]
    usage_info = metrics = None
    if usage is not None:  # a finished response: its usage and, as vLLM's, its per-request metrics
        metrics = x.metrics(usage)
        prompt_tokens = len(x.prompt.token_ids)
        usage_info = ResponseUsage(
            input_tokens=prompt_tokens, output_tokens=usage.completion_tokens,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
            total_tokens=prompt_tokens + usage.completion_tokens)
    return ResponseObject(
        id=x.head["id"], created_at=x.head["created"], model=x.head["model"], status=status,
        error=ResponseError(code="server_error", message=error) if error else None,
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if status == "incomplete" else None,
        instructions=body.instructions, max_output_tokens=body.max_output_tokens, output=output or [],
        temperature=body.temperature, top_p=body.top_p, usage=usage_info, metadata=body.metadata or {},
        metrics=metrics)


def _final_status(last: GenerationDelta) -> str:
    """``incomplete`` when the output budget ran out (OpenAI's status for it), else ``completed``."""
    return "incomplete" if last.finish_reason == "length" else "completed"


def _respond_responses(x: Exchange, answer: Answer) -> ResponseObject:
    status = _final_status(answer.last)
    item_status = "incomplete" if status == "incomplete" else "completed"
    output: list = []
    if answer.reasoning:
        output.append(ReasoningItem(id=f"rs_{uuid.uuid4().hex}", status=item_status,
                                    content=[ReasoningText(text=answer.reasoning)]))
    output.append(OutputMessage(id=f"msg_{uuid.uuid4().hex}", status=item_status,
                                content=[OutputText(text=answer.text)]))
    return _response(x, status, output, answer.last)


class _ResponseStream:
    """Builds one Responses stream's events: numbered, an output item (reasoning, then the message) opened at its
    first delta and closed with its ``*.done`` events when the next one opens or the answer ends."""

    def __init__(self, x: Exchange):
        self.x = x
        self.sequence = 0
        self.items: list = []  # the output items closed so far
        self.open: ReasoningItem | OutputMessage | None = None
        self.parts: list[str] = []

    def event(self, model_type: type[BaseModel], **fields) -> str:
        event = model_type(sequence_number=self.sequence, **fields)
        self.sequence += 1
        return format_event(event.model_dump_json(), event=fields["type"])

    def lifecycle(self, kind: str, response: ResponseObject) -> str:
        return self.event(ResponseLifecycleEvent, type=f"response.{kind}", response=response)

    def open_item(self, reasoning: bool) -> list[str]:
        """Close the open item if it is of the other kind and open one of this kind (events for both)."""
        if self.open is not None and isinstance(self.open, ReasoningItem) == reasoning:
            return []
        out = self.close("completed")
        item_id = f"{'rs' if reasoning else 'msg'}_{uuid.uuid4().hex}"
        self.open = (ReasoningItem(id=item_id, status="in_progress", content=[]) if reasoning
                     else OutputMessage(id=item_id, status="in_progress", content=[]))
        out.append(self.event(OutputItemEvent, type="response.output_item.added", output_index=len(self.items),
                              item=self.open))
        out.append(self.event(ContentPartEvent, type="response.content_part.added", item_id=item_id,
                              output_index=len(self.items), content_index=0, part=self._part("")))
        return out

    def delta(self, reasoning: bool, text: str) -> list[str]:
        out = self.open_item(reasoning)
        self.parts.append(text)
        out.append(self.event(TextDeltaEvent, type=self._kind("delta"), item_id=self.open.id,
                              output_index=len(self.items), content_index=0, delta=text,
                              logprobs=None if reasoning else []))
        return out

    def close(self, status: str) -> list[str]:
        """The ``*.done`` events of the open item (none when no item is open)."""
        if self.open is None:
            return []
        text, index, item_id = "".join(self.parts), len(self.items), self.open.id
        reasoning = isinstance(self.open, ReasoningItem)
        out = [self.event(TextDoneEvent, type=self._kind("done"), item_id=item_id, output_index=index,
                          content_index=0, text=text, logprobs=None if reasoning else []),
               self.event(ContentPartEvent, type="response.content_part.done", item_id=item_id, output_index=index,
                          content_index=0, part=self._part(text))]
        item = self.open.model_copy(update={"status": status, "content": [self._part(text)]})
        out.append(self.event(OutputItemEvent, type="response.output_item.done", output_index=index, item=item))
        self.items.append(item)
        self.open, self.parts = None, []
        return out

    def _kind(self, suffix: str) -> str:
        return f"response.{'reasoning_text' if isinstance(self.open, ReasoningItem) else 'output_text'}.{suffix}"

    def _part(self, text: str) -> OutputText | ReasoningText:
        return ReasoningText(text=text) if isinstance(self.open, ReasoningItem) else OutputText(text=text)


async def _responses_events(x: Exchange, generation: AsyncIterator[GenerationDelta]) -> AsyncIterator[str]:
    """``response.created`` and ``response.in_progress`` at once, the items' events as tokens come, then
    ``response.completed`` (or ``response.incomplete`` when the budget ran out) with usage; ``response.failed``
    with the error when the engine fails. No ``[DONE]``: the Responses API ends with its last event."""
    stream = _ResponseStream(x)
    yield stream.lifecycle("created", _response(x, "in_progress"))
    yield stream.lifecycle("in_progress", _response(x, "in_progress"))
    last = GenerationDelta("", 0)
    try:
        async for delta in generation:
            last = delta
            for reasoning, text in ((True, delta.reasoning), (False, delta.text)):
                if text:
                    for event in stream.delta(reasoning, text):
                        yield event
    except Exception as exc:  # engine failure after the headers went out
        for event in stream.close("incomplete"):
            yield event
        yield stream.lifecycle("failed", _response(x, "failed", stream.items, error=_error_message(exc)))
        return
    status = _final_status(last)
    if stream.open is None and not stream.items:
        for event in stream.open_item(False):  # an empty answer is still a message
            yield event
    for event in stream.close("incomplete" if status == "incomplete" else "completed"):
        yield event
    yield stream.lifecycle(status, _response(x, status, stream.items, last))


RESPONSES = APIStyle(
    id_prefix="resp_", prompt_param="input",
    prepare=lambda engine, body: _prepare_messages(engine, body.messages(), "input"),
    respond=_respond_responses,
    events=_responses_events,
)


# --------------------------------------------------------------------------- one request, any style


async def serve_generation(style: APIStyle, body: SamplingFields, request: Request):
    """Check, prepare, generate; answer as one JSON body or as an SSE stream.

    The response ``id`` is the style's prefix and the request's id (its ``X-Request-Id``, see
    :class:`RequestIdMiddleware`); ``timing.received`` is stamped here, on the parsed request.
    """
    timing = RequestTiming(received=time.monotonic())
    engine: Engine = request.app.state.engine
    _check_request(engine, body)
    prompt, budget = _prepare(engine, style, body)
    params = _sampling_params(body, budget)
    request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
    head = {"id": f"{style.id_prefix}{request_id}", "created": int(time.time()), "model": engine.served_model_name}
    exchange = Exchange(head, prompt, body, engine.reasons, engine.reasoning_field, timing)
    generation = request.app.state.metrics.timed(engine.generate(head["id"], prompt, params, timing),
                                                 engine.served_model_name, timing.received)
    if body.stream:
        return _sse_response(style.events(exchange, generation), generation)
    return style.respond(exchange, await _collect(request, generation))


def _check_request(engine: Engine, body: SamplingFields) -> None:
    problem = body.unsupported()
    if problem is not None:
        raise APIError(400, problem.args[0], param=problem.param, code="unsupported_parameter")
    if body.model is not None and body.model not in (engine.served_model_name, engine.model):
        raise APIError(404, f"The model `{body.model}` does not exist.", param="model", code="model_not_found")


def _prepare(engine: Engine, style: APIStyle, body: SamplingFields) -> tuple[PreparedPrompt, int]:
    """The prompt and its output budget, or a 400 when it is empty or does not fit the context."""
    prompt = style.prepare(engine, body)
    if not prompt.token_ids:
        raise APIError(400, "The prompt is empty: it has no tokens to continue from.", param=style.prompt_param)
    try:
        budget = engine.check_fits(prompt, body.max_tokens)
    except PromptTooLong as exc:
        # The prompt's fault when it leaves no room for one token; else the requested output's.
        budget_param = "max_output_tokens" if style is RESPONSES else "max_tokens"
        param = style.prompt_param if len(prompt.token_ids) >= engine.max_model_len else budget_param
        raise APIError(400, str(exc), param=param, code="context_length_exceeded") from None
    return prompt, budget


def _sampling_params(body: SamplingFields, max_tokens: int) -> SamplingParams:
    if body.min_tokens > max_tokens:
        raise APIError(400, f"min_tokens ({body.min_tokens}) must not exceed max_tokens ({max_tokens})",
                       param="min_tokens")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        stop=tuple(body.stop or ()),
        seed=body.seed,
        ignore_eos=body.ignore_eos,
        min_tokens=body.min_tokens,
    )


async def _collect(request: Request, stream: AsyncIterator[GenerationDelta]) -> Answer:
    """Run a generation to the end; cancel it and raise :class:`ClientDisconnected` once the client is gone."""

    async def consume() -> Answer:
        parts, reasoning, last = [], [], GenerationDelta("", 0)
        async for delta in stream:
            parts.append(delta.text)
            reasoning.append(delta.reasoning)
            last = delta
        return Answer("".join(parts), "".join(reasoning), last)

    task = asyncio.ensure_future(consume())
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                raise ClientDisconnected()
        return task.result()
    finally:
        if not task.done():
            task.cancel()  # the engine sees the cancellation at its next step (or skips a queued job)
            await asyncio.wait({task})
        await stream.aclose()


def _sse_response(events: AsyncIterator[str], generation: AsyncIterator[GenerationDelta]) -> StreamingResponse:
    """Stream ``events``; the generation stops when the client goes away.

    Starlette cancels the event generator when the client disconnects, and the
    ``finally`` then cancels the engine's work at once.
    """

    async def guarded() -> AsyncIterator[str]:
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()
            await generation.aclose()

    return StreamingResponse(guarded(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# --------------------------------------------------------------------------- app factory


def create_app(settings: ServerSettings | None = None, engine: Engine | None = None,
               engine_started: bool = False) -> FastAPI:
    """Build the FastAPI app; the engine is created and started in the app's lifespan.

    ``python -m server`` starts its engine before serving (so that a model that
    cannot load is a one-line error, not a traceback) and passes it with
    ``engine_started=True``; the lifespan then only stops it at shutdown.
    """
    settings = settings or ServerSettings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        active = engine or create_engine(settings)
        if engine is None or not engine_started:
            await asyncio.to_thread(active.start)
        app.state.engine = active
        app.state.metrics.started(active)
        log.info("engine %s ready: model %s, max_model_len %d", active.name, active.served_model_name,
                 active.max_model_len)
        try:
            yield
        finally:
            await asyncio.to_thread(active.stop)

    app = FastAPI(title="llmload basic server", version="0.1.0", lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = ServerMetrics(lambda: getattr(app.state, "engine", None))
    install_error_handlers(app)

    if settings.api_key:
        app.add_middleware(APIKeyMiddleware, api_key=settings.api_key)
    # Outside the others: every request's body is bounded before anything reads it (RequestLimits), and every
    # answer, errors included, carries the request's id (RequestIdMiddleware, which reads headers only).
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s)
    app.add_middleware(RequestIdMiddleware)

    @app.get("/health")
    async def health(request: Request) -> dict:
        return {"status": "ok", **request.app.state.engine.info()}

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Prometheus text format (not behind the API key, as ``/health``)."""
        text, content_type = request.app.state.metrics.render()
        return Response(text, media_type=content_type)

    @app.get("/v1/models")
    async def models(request: Request) -> ModelList:
        eng = request.app.state.engine
        return ModelList(data=[ModelCard(id=eng.served_model_name, root=eng.model, max_model_len=eng.max_model_len)])

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        return await serve_generation(COMPLETIONS, body, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        return await serve_generation(CHAT, body, request)

    @app.post("/v1/responses")
    async def responses(body: ResponsesRequest, request: Request):
        return await serve_generation(RESPONSES, body, request)

    return app


def __getattr__(name: str):
    # ``uvicorn server.app:app`` gets an app built from the environment on first access,
    # so importing this module builds nothing and loads nothing.
    if name == "app":
        value = create_app()
        globals()["app"] = value
        return value
    raise AttributeError(name)
