"""OpenAI-compatible request and response schemas (pydantic), in the OpenAI field order: completions, chat
completions and the Responses API (``/v1/responses``: its request, response object and stream events).

Only what the suite's servers implement is accepted with a non-default value;
options the engines cannot honour (``n > 1``, ``logprobs``, ``echo``, tools, ...)
are rejected with a clear 400 instead of being silently ignored. Unknown extra
fields are ignored, as vLLM does.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class UnsupportedOption(ValueError):
    """A request option this server does not implement (reported as a 400 naming ``param``)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class OpenAIBaseModel(BaseModel):
    """Base of every schema: unknown fields are ignored, known ones must have the right JSON type.

    Strict, as OpenAI's API is: ``"max_tokens": "5"`` or ``"stream": 1`` is a 400,
    not silently coerced (an integer is still accepted where a number is expected).
    """

    model_config = ConfigDict(extra="ignore", strict=True)


# --------------------------------------------------------------------------- errors


class ErrorInfo(OpenAIBaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | int | None = None


class ErrorResponse(OpenAIBaseModel):
    error: ErrorInfo


# --------------------------------------------------------------------------- shared pieces


def _is_none(value: Any) -> bool:
    return value is None


class StreamOptions(OpenAIBaseModel):
    include_usage: bool = False
    #: vLLM's extension: every chunk carries the usage so far (with include_usage), so clients see each
    #: chunk's token count.
    continuous_usage_stats: bool = False


class CompletionTokensDetails(OpenAIBaseModel):
    reasoning_tokens: int = 0


class UsageInfo(OpenAIBaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: Sent by engines that reason (as vLLM sends it with a reasoning parser), left out otherwise.
    completion_tokens_details: CompletionTokensDetails | None = Field(default=None, exclude_if=_is_none)


class PerRequestMetrics(OpenAIBaseModel):
    """vLLM's per-request timing (``--enable-per-request-metrics``), in milliseconds, plus ``frontend_time_ms``.

    Computed by :meth:`server.engines.base.RequestTiming.metrics_ms`; None where a stage was not reached.
    """

    time_to_first_token_ms: float | None = None
    generation_time_ms: float | None = None
    queue_time_ms: float | None = None
    mean_itl_ms: float | None = None
    tokens_per_second: float | None = None
    #: Not in vLLM: from the route handler starting on the parsed request to the engine taking it.
    frontend_time_ms: float | None = None


PositiveInt = Annotated[int, Field(ge=1)]
#: The range ``torch.Generator.manual_seed`` accepts.
Seed = Annotated[int, Field(ge=-(2**63), le=2**64 - 1)]


class SamplingFields(OpenAIBaseModel):
    """Fields both endpoints share, and the checks of options the engines do not support."""

    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    seed: Seed | None = None
    stop: list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    user: str | None = None
    # vLLM extensions the benchmark needs for fixed output lengths.
    ignore_eos: bool = False
    min_tokens: Annotated[int, Field(ge=0)] = 0

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> Any:
        # OpenAI accepts one string or a list of strings; errors then name ``stop`` itself.
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, stops: list[str] | None) -> list[str] | None:
        if stops is None:
            return None
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty")
        return stops

    def unsupported(self) -> UnsupportedOption | None:
        """The first option set to a value the engines cannot honour, or None."""
        if self.n not in (None, 1):
            return UnsupportedOption("n", "only n=1 is supported")
        if self.logit_bias:
            return UnsupportedOption("logit_bias", "logit_bias is not supported")
        if self.frequency_penalty not in (None, 0.0):
            return UnsupportedOption("frequency_penalty", "frequency_penalty is not supported")
        if self.presence_penalty not in (None, 0.0):
            return UnsupportedOption("presence_penalty", "presence_penalty is not supported")
        if self.stream_options is not None and not self.stream:
            return UnsupportedOption("stream_options", "stream_options is only allowed when stream is true")
        return None


class ToolFields(OpenAIBaseModel):
    """Tool options, accepted only when they ask for no tool (the engines cannot call tools)."""

    tools: list | None = None
    tool_choice: Any = None

    def tools_unsupported(self) -> UnsupportedOption | None:
        if self.tools:
            return UnsupportedOption("tools", "tools are not supported")
        if self.tool_choice not in (None, "none", "auto"):
            return UnsupportedOption("tool_choice", "tool_choice is not supported")
        return None


# --------------------------------------------------------------------------- completions


class CompletionRequest(SamplingFields):
    model: str | None = None
    prompt: Annotated[str, Field(min_length=1)]
    best_of: int | None = None
    echo: bool = False
    logprobs: int | None = None
    max_tokens: PositiveInt | None = 16
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_is_text(cls, value: Any) -> Any:
        if isinstance(value, list):
            raise ValueError("only a single string prompt is supported (not a list or token ids)")
        return value

    def unsupported(self) -> UnsupportedOption | None:
        if self.best_of not in (None, 1):
            return UnsupportedOption("best_of", "best_of is not supported")
        if self.echo:
            return UnsupportedOption("echo", "echo is not supported")
        if self.logprobs is not None:
            return UnsupportedOption("logprobs", "logprobs is not supported")
        if self.suffix:
            return UnsupportedOption("suffix", "suffix is not supported")
        return super().unsupported()


class CompletionChoice(OpenAIBaseModel):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class CompletionResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    metrics: PerRequestMetrics | None = Field(default=None, exclude_if=_is_none)


class CompletionStreamChoice(OpenAIBaseModel):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class CompletionChunk(OpenAIBaseModel):
    """One SSE chunk of a streamed completion (OpenAI streams ``text_completion`` objects)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionStreamChoice]
    usage: UsageInfo | None = None
    #: On the final usage chunk only (``choices: []``), as vLLM sends it.
    metrics: PerRequestMetrics | None = Field(default=None, exclude_if=_is_none)


# --------------------------------------------------------------------------- chat completions


class TextContentPart(OpenAIBaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(OpenAIBaseModel):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextContentPart]
    name: str | None = None

    def text(self) -> str:
        """The message's content as one string (text parts joined)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields, ToolFields):
    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    logprobs: bool = False
    top_logprobs: int | None = None
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    response_format: dict | None = None

    @model_validator(mode="after")
    def _one_budget(self) -> "ChatCompletionRequest":
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self

    def unsupported(self) -> UnsupportedOption | None:
        if self.logprobs or self.top_logprobs:
            return UnsupportedOption("logprobs", "logprobs is not supported")
        if problem := self.tools_unsupported():
            return problem
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            return UnsupportedOption("response_format", "only response_format type 'text' is supported")
        return super().unsupported()


class ChatResponseMessage(OpenAIBaseModel):
    """The answer; reasoning under the engine's field name (``reasoning`` or ``reasoning_content``) when any."""

    role: Literal["assistant"] = "assistant"
    content: str
    reasoning: str | None = Field(default=None, exclude_if=_is_none)
    reasoning_content: str | None = Field(default=None, exclude_if=_is_none)


class ChatCompletionChoice(OpenAIBaseModel):
    index: int = 0
    message: ChatResponseMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionResponse(OpenAIBaseModel):
    id: str = Field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    metrics: PerRequestMetrics | None = Field(default=None, exclude_if=_is_none)


class DeltaMessage(OpenAIBaseModel):
    """A chat chunk's delta: unset fields are left out (``{}`` for a chunk without text), as OpenAI sends it."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=_is_none)
    content: str | None = Field(default=None, exclude_if=_is_none)
    reasoning: str | None = Field(default=None, exclude_if=_is_none)
    reasoning_content: str | None = Field(default=None, exclude_if=_is_none)


class ChatCompletionStreamChoice(OpenAIBaseModel):
    index: int = 0
    delta: DeltaMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(OpenAIBaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionStreamChoice]
    usage: UsageInfo | None = None
    #: On the final usage chunk only (``choices: []``), as vLLM sends it.
    metrics: PerRequestMetrics | None = Field(default=None, exclude_if=_is_none)


# --------------------------------------------------------------------------- the Responses API


class InputTextPart(OpenAIBaseModel):
    type: Literal["input_text", "output_text"]  # output_text: an earlier assistant turn given back
    text: str


class InputMessage(OpenAIBaseModel):
    """One item of a Responses ``input`` list: a message (other item types are not supported)."""

    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[InputTextPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


class ResponsesRequest(SamplingFields, ToolFields):
    """``POST /v1/responses``: ``input`` as text (one user message) or messages; ``max_output_tokens`` (which,
    as in OpenAI's API, counts reasoning tokens too)."""

    model: str | None = None
    input: str | Annotated[list[InputMessage], Field(min_length=1)]
    instructions: str | None = None
    max_output_tokens: PositiveInt | None = None
    store: bool | None = True  # accepted; nothing is stored (as vLLM without VLLM_ENABLE_RESPONSES_API_STORE)
    metadata: dict[str, str] | None = None
    background: bool | None = False
    previous_response_id: str | None = None
    reasoning: dict | None = None
    text: dict | None = None
    parallel_tool_calls: bool | None = True
    top_logprobs: int | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"

    @property
    def max_tokens(self) -> int | None:
        """The output budget under the name the engines take."""
        return self.max_output_tokens

    def messages(self) -> list[dict]:
        """The conversation to render: ``instructions`` as a system message first, then the input."""
        items = ([{"role": "user", "content": self.input}] if isinstance(self.input, str)
                 else [{"role": m.role, "content": m.text()} for m in self.input])
        return ([{"role": "system", "content": self.instructions}] if self.instructions else []) + items

    def unsupported(self) -> UnsupportedOption | None:
        if self.background:
            return UnsupportedOption("background", "background responses are not supported")
        if self.previous_response_id:
            return UnsupportedOption("previous_response_id", "previous_response_id is not supported (nothing is "
                                                             "stored): send the whole conversation as input")
        if problem := self.tools_unsupported():
            return problem
        if self.reasoning:
            return UnsupportedOption("reasoning", "reasoning options are not supported")
        if self.top_logprobs:
            return UnsupportedOption("top_logprobs", "top_logprobs is not supported")
        text_format = (self.text or {}).get("format") or {}
        if text_format.get("type") not in (None, "text"):
            return UnsupportedOption("text.format", "only text.format type 'text' is supported")
        return super().unsupported()


class OutputTokensDetails(OpenAIBaseModel):
    reasoning_tokens: int = 0


class InputTokensDetails(OpenAIBaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class ResponseUsage(OpenAIBaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)
    total_tokens: int


class OutputText(OpenAIBaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list = Field(default_factory=list)


class ReasoningText(OpenAIBaseModel):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(OpenAIBaseModel):
    id: str
    type: Literal["message"] = "message"
    status: ItemStatus
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class ReasoningItem(OpenAIBaseModel):
    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list = Field(default_factory=list)
    content: list[ReasoningText]
    status: ItemStatus


class IncompleteDetails(OpenAIBaseModel):
    reason: Literal["max_output_tokens"]


class ResponseError(OpenAIBaseModel):
    code: str
    message: str


class ResponseObject(OpenAIBaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "failed", "in_progress", "incomplete"]
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[ReasoningItem | OutputMessage] = Field(default_factory=list)
    parallel_tool_calls: bool = True
    previous_response_id: None = None
    store: bool = False
    temperature: float | None = None
    text: dict = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str = "auto"
    tools: list = Field(default_factory=list)
    top_p: float | None = None
    truncation: str = "disabled"
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    #: On the finished response only (the sync body, the stream's last event), as vLLM sends it.
    metrics: PerRequestMetrics | None = Field(default=None, exclude_if=_is_none)


class ResponseLifecycleEvent(OpenAIBaseModel):
    """``response.created`` ... ``response.completed``: the whole response object as it stands."""

    type: Literal["response.created", "response.in_progress", "response.completed", "response.incomplete",
                  "response.failed"]
    sequence_number: int
    response: ResponseObject


class OutputItemEvent(OpenAIBaseModel):
    type: Literal["response.output_item.added", "response.output_item.done"]
    sequence_number: int
    output_index: int
    item: ReasoningItem | OutputMessage


class ContentPartEvent(OpenAIBaseModel):
    type: Literal["response.content_part.added", "response.content_part.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class TextDeltaEvent(OpenAIBaseModel):
    """``response.output_text.delta`` or ``response.reasoning_text.delta`` (logprobs only on the former)."""

    type: Literal["response.output_text.delta", "response.reasoning_text.delta"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list | None = Field(default=None, exclude_if=_is_none)


class TextDoneEvent(OpenAIBaseModel):
    type: Literal["response.output_text.done", "response.reasoning_text.done"]
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list | None = Field(default=None, exclude_if=_is_none)


# --------------------------------------------------------------------------- models


class ModelCard(OpenAIBaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "llmload"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(OpenAIBaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
