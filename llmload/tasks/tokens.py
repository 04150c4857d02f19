"""The model's tokenizer, counting prompts exactly as the basic server does.

Raw texts (no special tokens: a stream's chunks, a generated answer) are counted
by the ``tokenizers`` library straight from a local folder's ``tokenizer.json``,
the same backend transformers' fast tokenizers run, without importing
transformers (0.1 s against 6 s here); everything else (special tokens, the chat
template, decoding, offsets) loads transformers' ``AutoTokenizer`` on first use.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from llmload.core.records import DatasetError


def tokenizer_name(model: str) -> str:
    """The name recorded in each record's build settings: the folder name of a local model, else the id."""
    path = Path(model)
    return path.name if path.is_dir() else model


def first_line(exc: BaseException) -> str:
    """An exception's first line of text (its class name only when it says nothing)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def load_auto_tokenizer(model: str):
    """transformers' ``AutoTokenizer`` of ``model`` (a local folder or a hub id); ValueError (one line) if it cannot."""
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError:
        raise ValueError("the package transformers is not installed: run `pip install transformers` "
                         "(or `make venv`)") from None
    hf_logging.set_verbosity_error()
    try:
        return AutoTokenizer.from_pretrained(model)
    except Exception as exc:  # noqa: BLE001 - OSError, ValueError, hub errors: all mean "no tokenizer"
        raise ValueError(first_line(exc)) from None


def load_backend(model: str):
    """The ``tokenizers`` library's tokenizer of a local folder's ``tokenizer.json``; None where there is none."""
    path = Path(model) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a file the library cannot read: transformers says why, if it cannot either
        return None


class TokenCounter:
    """The model's tokenizer, in batches: completion prompts with special tokens, chat after the template."""

    def __init__(self, model: str, name: str, backend=None):
        self.model = model
        self.name = name
        self.backend = backend  # the tokenizers library's, for raw texts (None: transformers' for everything)

    @classmethod
    @functools.lru_cache(maxsize=4)
    def open(cls, model: str) -> "TokenCounter":
        """The tokenizer of ``model`` (a local folder or a hub id), cached per process; ValueError (one line)."""
        counter = cls(model, tokenizer_name(model), load_backend(model))
        if counter.backend is None:
            counter.__dict__["tokenizer"] = load_auto_tokenizer(model)  # now, so a missing tokenizer is said here
        return counter

    @classmethod
    def load(cls, model: str) -> "TokenCounter":
        """:meth:`open`, its error a :class:`DatasetError` that says what to pass instead."""
        try:
            return cls.open(model)
        except ValueError as exc:
            raise DatasetError(cls.cannot(model, exc)) from None

    @staticmethod
    def cannot(model: str, reason: object) -> str:
        return f"cannot load the tokenizer of {model} ({reason}): pass --model with a local model folder or a " \
               "reachable hub id"

    @functools.cached_property
    def tokenizer(self):
        """transformers' tokenizer (loaded on first use)."""
        try:
            return load_auto_tokenizer(self.model)
        except ValueError as exc:
            raise DatasetError(self.cannot(self.model, exc)) from None

    @functools.cached_property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    # ------------------------------------------------------------------ token ids

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of completion prompts (special tokens added, as the server encodes them)."""
        return self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]

    def text_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of raw texts (no special tokens)."""
        if self.backend is not None:
            return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]
        return self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]

    def chat_text(self, messages: Sequence[dict]) -> str:
        """The text the chat template makes of ``messages``, ready for the assistant's answer."""
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def chat_ids(self, conversations: Sequence[Sequence[dict]]) -> list[list[int] | None]:
        """Token ids of chat requests after the model's chat template (None without a template)."""
        if not self.has_chat_template:
            return [None] * len(conversations)
        return self.text_ids([self.chat_text(messages) for messages in conversations])

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens left out, spaces as they were."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    # ------------------------------------------------------------------ counts

    def prompt_tokens(self, prompts: Sequence[str]) -> list[int]:
        """Token counts of completion prompts (special tokens added, as the server encodes them)."""
        return [len(ids) for ids in self.prompt_ids(prompts)]

    def text_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of raw texts (no special tokens): a stream's chunks, a generated answer."""
        return [len(ids) for ids in self.text_ids(texts)] if texts else []

    def chat_tokens(self, conversations: Sequence[Sequence[dict]]) -> list[int | None]:
        """Token counts of chat requests after the model's chat template (None without a template)."""
        return [None if ids is None else len(ids) for ids in self.chat_ids(conversations)]

    def text_offsets(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Character spans of the tokens of each raw text (no special tokens)."""
        return self.tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]

    @functools.cached_property
    def special_tokens(self) -> int:
        """How many tokens the tokenizer adds to a completion prompt (BOS and the like)."""
        return len(self.prompt_ids(["hello"])[0]) - len(self.text_ids(["hello"])[0])
