"""Fixtures of the prompt-set tests: the real tokenizer, and small local copies of the four HF datasets.

The local copies (:mod:`prompt_copies`) have the hub datasets' own columns, so that
the ``hf`` source runs through ``datasets.load_dataset`` exactly as with the hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llmload.tasks.tokens import TokenCounter
from prompt_copies import write_hf_copies


@pytest.fixture(scope="session")
def counter(default_model) -> TokenCounter:
    return TokenCounter.load(default_model)


@pytest.fixture(scope="session")
def tokenizer(counter):
    return counter.tokenizer


@pytest.fixture(scope="session")
def hf_copies(tmp_path_factory) -> dict[str, Path]:
    return write_hf_copies(tmp_path_factory.mktemp("hf-copies"))


@pytest.fixture
def hf_cache(tmp_path) -> Path:
    """A private Arrow cache for ``datasets`` (nothing written to the user's cache)."""
    return tmp_path / "hf-cache"
