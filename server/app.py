"""HTTP layer: the OpenAI-compatible routes and the app factory.

``uvicorn server.app:app`` serves :data:`app`, built from ``LLMLOAD_*``
environment variables; ``python -m server`` builds one from its flags. The
engine (and so the model) is created and loaded at start-up, never at import.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
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
from server.engines.base import (Engine, FinishReason, GenerationDelta, PreparedPrompt, PromptTooLong,
                                 SamplingParams)
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
    DeltaMessage,
    ErrorInfo,
    ErrorResponse,
    ModelCard,
    ModelList,
    SamplingFields,
    UsageInfo,
)
from server.settings import ServerSettings

log = logging.getLogger("server")

DISCONNECT_POLL_S = 0.05


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


# --------------------------------------------------------------------------- the two API styles


@dataclass(frozen=True)
class APIStyle:
    """What differs between ``/v1/completions`` and ``/v1/chat/completions``; the rest is :func:`serve_generation`."""

    id_prefix: str
    #: The request field that holds the prompt (named by prompt errors).
    prompt_param: str
    prepare: Callable[[Engine, SamplingFields], PreparedPrompt]
    response: type[BaseModel]
    #: The non-streamed answer's choice, from the whole text and the finish reason.
    choice: Callable[[str, FinishReason | None], BaseModel]
    chunk: type[BaseModel]
    #: A streamed chunk's choice, from one delta.
    stream_choice: Callable[[GenerationDelta], BaseModel]
    #: Choices streamed just before the first token's chunk (the chat role chunk).
    preamble: tuple[BaseModel, ...] = ()


def _prepare_chat(engine: Engine, body: ChatCompletionRequest) -> PreparedPrompt:
    messages = [{"role": m.role, "content": m.text()} for m in body.messages]
    try:
        return engine.prepare_chat(messages)
    except Exception as exc:  # e.g. a chat template that rejects the role order
        raise APIError(400, f"cannot apply the chat template: {exc}", param="messages") from None


COMPLETIONS = APIStyle(
    id_prefix="cmpl", prompt_param="prompt",
    prepare=lambda engine, body: engine.prepare_completion(body.prompt),
    response=CompletionResponse,
    choice=lambda text, finish: CompletionChoice(text=text, finish_reason=finish),
    chunk=CompletionChunk,
    stream_choice=lambda d: CompletionStreamChoice(text=d.text, finish_reason=d.finish_reason),
)
CHAT = APIStyle(
    id_prefix="chatcmpl", prompt_param="messages",
    prepare=_prepare_chat,
    response=ChatCompletionResponse,
    choice=lambda text, finish: ChatCompletionChoice(message=ChatResponseMessage(content=text), finish_reason=finish),
    chunk=ChatCompletionChunk,
    stream_choice=lambda d: ChatCompletionStreamChoice(delta=DeltaMessage(content=d.text or None),
                                                       finish_reason=d.finish_reason),
    # As vLLM does, the role chunk goes out with the first token.
    preamble=(ChatCompletionStreamChoice(delta=DeltaMessage(role="assistant", content="")),),
)


# --------------------------------------------------------------------------- one request, either style


async def serve_generation(style: APIStyle, body: SamplingFields, request: Request):
    """Check, prepare, generate; answer as one JSON body or as an SSE stream."""
    started = time.perf_counter()
    engine: Engine = request.app.state.engine
    _check_request(engine, body)
    prompt, budget = _prepare(engine, style, body)
    params = _sampling_params(body, budget)
    head = {"id": f"{style.id_prefix}-{uuid.uuid4().hex}", "created": int(time.time()),
            "model": engine.served_model_name}
    generation = request.app.state.metrics.timed(engine.generate(head["id"], prompt, params),
                                                 engine.served_model_name, started)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return _sse_response(style, head, generation, prompt, include_usage)
    text, last = await _collect(request, generation)
    return style.response(**head, choices=[style.choice(text, last.finish_reason)],
                          usage=_usage(prompt, last.completion_tokens))


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
        param = style.prompt_param if len(prompt.token_ids) >= engine.max_model_len else "max_tokens"
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


async def _collect(request: Request, stream: AsyncIterator[GenerationDelta]) -> tuple[str, GenerationDelta]:
    """Run a generation to the end; cancel it and raise :class:`ClientDisconnected` once the client is gone."""

    async def consume() -> tuple[str, GenerationDelta]:
        parts, last = [], GenerationDelta("", 0)
        async for delta in stream:
            parts.append(delta.text)
            last = delta
        return "".join(parts), last

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


def _sse_response(style: APIStyle, head: dict, generation: AsyncIterator[GenerationDelta], prompt: PreparedPrompt,
                  include_usage: bool) -> StreamingResponse:
    """Stream a generation as OpenAI SSE chunks; the generation stops when the client goes away.

    The style's preamble waits for the first token, as in vLLM: clients that
    time the first chunk with ``choices`` (``vllm bench serve`` does) then
    measure the time to the first token, not to the request's acceptance.
    Chunks carry ``usage: null`` only when ``include_usage`` asks for the final
    usage chunk. Starlette cancels this generator when the client disconnects,
    and the ``finally`` then cancels the engine's work at once.
    """
    exclude = None if include_usage else {"usage"}

    def chunk(choices: list[BaseModel], usage: UsageInfo | None = None) -> str:
        return format_event(style.chunk(**head, choices=choices, usage=usage).model_dump_json(exclude=exclude))

    async def events() -> AsyncIterator[str]:
        tokens = 0
        waiting = list(style.preamble)
        try:
            try:
                async for delta in generation:
                    for choice in waiting:
                        yield chunk([choice])
                    waiting = []
                    tokens = delta.completion_tokens
                    yield chunk([style.stream_choice(delta)])
            except Exception as exc:  # engine failure after the headers went out
                yield _error_event(exc)
            else:
                for choice in waiting:  # a generation without any delta still answers in full
                    yield chunk([choice])
                if include_usage:
                    yield chunk([], _usage(prompt, tokens))
            yield format_event(DONE_SENTINEL)
        finally:
            await generation.aclose()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _usage(prompt: PreparedPrompt, completion_tokens: int) -> UsageInfo:
    prompt_tokens = len(prompt.token_ids)
    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     total_tokens=prompt_tokens + completion_tokens)


def _error_event(exc: Exception) -> str:
    log.exception("generation failed mid-stream")
    info = ErrorInfo(message=f"generation failed: {type(exc).__name__}: {exc}", type="internal_server_error")
    return format_event(ErrorResponse(error=info).model_dump_json())


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
    # Added last, so outermost: every request's body is bounded before anything else reads it.
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes, body_timeout_s=settings.body_timeout_s)

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

    return app


def __getattr__(name: str):
    # ``uvicorn server.app:app`` gets an app built from the environment on first access,
    # so importing this module builds nothing and loads nothing.
    if name == "app":
        value = create_app()
        globals()["app"] = value
        return value
    raise AttributeError(name)
