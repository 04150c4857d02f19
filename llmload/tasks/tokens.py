"""The model's tokenizer, counting prompts exactly as the basic server does."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Sequence

from llmload.core.records import DatasetError


def tokenizer_name(model: str) -> str:
    """The name recorded in each record's build settings: the folder name of a local model, else the id."""
    path = Path(model)
    return path.name if path.is_dir() else model


class TokenCounter:
    """The model's fast tokenizer, in batches: completion prompts with special tokens, chat after the template."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self.name = name
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    @classmethod
    @functools.lru_cache(maxsize=4)
    def load(cls, model: str) -> "TokenCounter":
        """Load the tokenizer of ``model`` (a local folder or a hub id); cached per process."""
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        except ImportError:
            raise DatasetError("the package transformers is not installed: run `pip install transformers` "
                               "(or `make venv`)") from None
        except Exception as exc:  # noqa: BLE001 - OSError, ValueError, hub errors: all mean "no tokenizer"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise DatasetError(f"cannot load the tokenizer of {model} ({first}): pass --model with a local "
                               f"model folder or a reachable hub id") from None
        return cls(tokenizer, tokenizer_name(model))

    # ------------------------------------------------------------------ token ids

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """Token ids of completion prompts (special tokens added, as the server encodes them)."""
        return self.tokenizer(list(prompts), add_special_tokens=True)["input_ids"]

    def text_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of raw texts (no special tokens)."""
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
