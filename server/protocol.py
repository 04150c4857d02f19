"""OpenAI-compatible request and response schemas (pydantic), in the OpenAI field order.

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


class StreamOptions(OpenAIBaseModel):
    include_usage: bool = False


class UsageInfo(OpenAIBaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


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


class ChatCompletionRequest(SamplingFields):
    model: str | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    logprobs: bool = False
    top_logprobs: int | None = None
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    response_format: dict | None = None
    tools: list | None = None
    tool_choice: Any = None

    @model_validator(mode="after")
    def _one_budget(self) -> "ChatCompletionRequest":
        if self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self

    def unsupported(self) -> UnsupportedOption | None:
        if self.logprobs or self.top_logprobs:
            return UnsupportedOption("logprobs", "logprobs is not supported")
        if self.tools:
            return UnsupportedOption("tools", "tools are not supported")
        if self.tool_choice not in (None, "none", "auto"):
            return UnsupportedOption("tool_choice", "tool_choice is not supported")
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            return UnsupportedOption("response_format", "only response_format type 'text' is supported")
        return super().unsupported()


class ChatResponseMessage(OpenAIBaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


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


def _is_none(value: Any) -> bool:
    return value is None


class DeltaMessage(OpenAIBaseModel):
    """A chat chunk's delta: unset fields are left out (``{}`` for a chunk without text), as OpenAI sends it."""

    role: Literal["assistant"] | None = Field(default=None, exclude_if=_is_none)
    content: str | None = Field(default=None, exclude_if=_is_none)


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
