"""The Completions API (``POST /v1/completions``): a prompt in, ``choices[0].text`` out."""

from __future__ import annotations

from llmload.core.apis.choices import ChoicesStyle, TypedChoice
from llmload.core.wire import Piece, text_of

class Completion(ChoicesStyle):
    """The record's prompt as ``prompt``; each chunk's (and the body's) first choice's ``text`` is answer text."""

    name = "completion"
    path = "/v1/completions"

    def prompt_fields(self, record, history) -> dict:
        return {"prompt": record.prompt}

    def take_choice(self, reader, choice: TypedChoice, offset: float, running: int | None) -> None:
        if choice.text:
            reader.record(offset, choice.text, "", "", (), running)

    def choice_piece(self, choice: dict) -> Piece:
        return Piece(answer=text_of(choice.get("text")))
