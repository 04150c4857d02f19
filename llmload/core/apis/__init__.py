"""The API styles the client speaks: one handler per style, by name (adding one: its file and one line here).

    from llmload.core.apis import APIS, GenerationParams, api_style, build_body

Each handler (:class:`~llmload.core.apis.base.APIStyle`) owns its URL path,
its request body, its stream events (the typed fast path and the whole-dict
path), what ends its stream and its sync body; :mod:`llmload.core.wire` does
the rest, the same for every style.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.core.apis.base import APIStyle
from llmload.core.apis.chat import Chat
from llmload.core.apis.completion import Completion
from llmload.core.apis.responses import Responses
from llmload.core.metrics import MODES
from llmload.core.records import PromptRecord

#: Every API style by name, in the order ``--api`` lists them.
STYLES: dict[str, APIStyle] = {style.name: style for style in (
    Completion(),
    Chat(),
    Responses(),
)}
#: Their names: ``--api``'s choices.
APIS = tuple(STYLES)

__all__ = ["APIS", "STYLES", "APIStyle", "GenerationParams", "api_style", "build_body"]


def api_style(name: str) -> APIStyle:
    """The handler of the style called ``name`` (ValueError naming the known ones)."""
    style = STYLES.get(name)
    if style is None:
        raise ValueError(f"api must be one of {', '.join(APIS)} (got {name!r})")
    return style


@dataclass(frozen=True)
class GenerationParams:
    """What every request of a run asks for (the prompt comes from the record)."""

    api: str = "chat"
    mode: str = "stream"
    max_tokens: int | None = None  # None: each record's own budget
    ignore_eos: bool = False
    temperature: float = 0.0
    continuous_usage: bool = True  # ask chat/completion streams for each chunk's running token count

    def __post_init__(self) -> None:
        api_style(self.api)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)} (got {self.mode!r})")

    @property
    def style(self) -> APIStyle:
        return STYLES[self.api]

    @property
    def path(self) -> str:
        return self.style.path

    @property
    def stream(self) -> bool:
        return self.mode == "stream"


def build_body(record: PromptRecord, params: GenerationParams, model: str,
               messages: list[dict] | None = None) -> dict:
    """The JSON body of one request for ``record`` in ``params``' API style and mode (``messages``: a
    conversation's history so far, in place of the record's own)."""
    return params.style.build_body(record, params, model, messages)
