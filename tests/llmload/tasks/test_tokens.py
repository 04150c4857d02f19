"""The token counter: raw texts counted by the tokenizers library agree with transformers' tokenizer."""

from __future__ import annotations

import pytest

from llmload.core.records import DatasetError
from llmload.tasks.tokens import TokenCounter, load_auto_tokenizer

pytestmark = [pytest.mark.unit, pytest.mark.model]

TEXTS = ["hello  world\n\n", " w0 w1 w2", "été 😀 naïve café", "", "   ", "def f(x):\n\treturn x ** 2\n",
         "<|im_start|>user\nhi<|im_end|>", "The quick brown fox jumps over the lazy dog. " * 40,
         "数学の問題を解いてください。", "\u200b\ufeffzero width", "a" * 3000]


def test_raw_texts_count_as_transformers_counts_them(counter, tokenizer):
    assert counter.backend is not None  # the materialised model has its tokenizer.json
    expected = tokenizer(TEXTS, add_special_tokens=False)["input_ids"]
    assert counter.text_ids(TEXTS) == expected
    assert counter.text_tokens(TEXTS) == [len(ids) for ids in expected]


def test_a_folder_without_a_tokenizer_is_one_line(tmp_path):
    with pytest.raises(DatasetError) as caught:
        TokenCounter.load(str(tmp_path))
    message = str(caught.value)
    assert "\n" not in message and str(tmp_path) in message and "pass --model" in message
    with pytest.raises(ValueError):
        load_auto_tokenizer(str(tmp_path))
