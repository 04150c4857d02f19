"""Unit tests of ``server/engines/sequence.py`` with the embedded model's real tokenizer (no model weights).

Token ids are fed one at a time, as the engines do, and the deltas checked:
incremental detokenisation (leading spaces, multi-byte characters split across
byte-level tokens), stop strings (cut, never streamed, even split across
tokens), ``max_tokens``, EOS, ``ignore_eos`` and ``min_tokens``; then the sampler.
"""

from __future__ import annotations

import pytest
import torch

from server.engines.base import SamplingParams
from server.engines.sequence import IncrementalDetokenizer, SequenceState, sample_next_token

pytestmark = [pytest.mark.unit, pytest.mark.model]  # the embedded model's tokenizer

PROMPT = "Write something:"
TEXTS = {
    "ascii": "Hello world, this is a test.",
    "leading-and-double-spaces": "   three leading spaces,  two  between words ",
    "newlines-and-tabs": "line one\n\n\tindented line\n",
    "korean": "안녕하세요, 세계! 반갑습니다.",
    "emoji": "Party 🎉🚀 and a family 👩‍👩‍👧 emoji",
    "accents": "Café, naïve, résumé, Ærøskøbing, Straße, ñandú",
    "cjk-mixed": "日本語 and English 混合 text",
}


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def feed(tokenizer, token_ids, params: SamplingParams, prompt: str = PROMPT,
         eos: frozenset[int] | None = None) -> tuple[SequenceState, list]:
    """Append ``token_ids`` until the sequence finishes; return the state and the deltas it gave."""
    eos = frozenset({tokenizer.eos_token_id}) if eos is None else eos
    state = SequenceState(tokenizer, tuple(encode(tokenizer, prompt)), params, eos)
    deltas = []
    for token in token_ids:
        delta = state.append(token)
        if delta is not None:
            deltas.append(delta)
        if state.finished:
            break
    return state, deltas


def streamed(deltas) -> str:
    return "".join(d.text for d in deltas)


@pytest.mark.parametrize("name", TEXTS)
def test_incremental_text_equals_the_full_decode(hf_tokenizer, name):
    text = TEXTS[name]
    ids = encode(hf_tokenizer, text)
    assert hf_tokenizer.decode(ids) == text  # the tokenizer round-trips: the reference is exact
    state, deltas = feed(hf_tokenizer, ids, SamplingParams(max_tokens=len(ids)))
    assert streamed(deltas) == text
    assert all("\ufffd" not in d.text for d in deltas), [d.text for d in deltas]
    assert [d.completion_tokens for d in deltas][-1] == len(ids) and deltas[-1].finish_reason == "length"
    assert all(d.finish_reason is None for d in deltas[:-1])


def test_multibyte_characters_really_span_several_tokens(hf_tokenizer):
    """Korean and emoji come as byte tokens that alone decode to U+FFFD: the detokeniser must wait for them."""
    for name in ("korean", "emoji"):
        ids = encode(hf_tokenizer, TEXTS[name])
        assert any(hf_tokenizer.decode([i]) == "\ufffd" for i in ids), name
        detok = IncrementalDetokenizer(hf_tokenizer, encode(hf_tokenizer, PROMPT))
        pieces = [detok.push(i) for i in ids]
        assert "" in pieces  # some tokens completed no character yet
        assert "".join(pieces) == TEXTS[name]


def test_leading_space_after_the_prompt_is_kept(hf_tokenizer):
    state, deltas = feed(hf_tokenizer, encode(hf_tokenizer, " Paris is lovely"), SamplingParams(max_tokens=3),
                         prompt="The capital of France is")
    assert deltas[0].text == " Paris" and streamed(deltas) == " Paris is lovely"


def test_after_a_chat_prompt_the_special_tokens_are_not_text(hf_tokenizer):
    prompt_ids = hf_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                                  add_generation_prompt=True)["input_ids"]
    state = SequenceState(hf_tokenizer, tuple(prompt_ids), SamplingParams(max_tokens=8),
                          frozenset({hf_tokenizer.eos_token_id}))
    deltas = [state.append(i) for i in encode(hf_tokenizer, "Hello! How are you?")]
    assert "".join(d.text for d in deltas if d) == "Hello! How are you?"


def test_max_tokens_finishes_with_length(hf_tokenizer):
    ids = encode(hf_tokenizer, TEXTS["ascii"])
    state, deltas = feed(hf_tokenizer, ids, SamplingParams(max_tokens=3))
    assert len(state.token_ids) == 3 and state.finish_reason == "length"
    assert streamed(deltas) == hf_tokenizer.decode(ids[:3])


def test_eos_finishes_with_stop_and_counts_as_a_token(hf_tokenizer):
    ids = encode(hf_tokenizer, "Yes.") + [hf_tokenizer.eos_token_id] + encode(hf_tokenizer, " more")
    state, deltas = feed(hf_tokenizer, ids, SamplingParams(max_tokens=20))
    assert state.finish_reason == "stop" and streamed(deltas) == "Yes."
    assert deltas[-1].completion_tokens == len(encode(hf_tokenizer, "Yes.")) + 1


def test_ignore_eos_runs_to_max_tokens_without_special_text(hf_tokenizer):
    eos = hf_tokenizer.eos_token_id
    ids = encode(hf_tokenizer, "Yes.") + [eos] + encode(hf_tokenizer, " And more") + [eos] * 10
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    state, deltas = feed(hf_tokenizer, ids, params)
    assert state.finish_reason == "length" and len(state.token_ids) == 10
    assert streamed(deltas) == "Yes. And more"


def test_min_tokens_blocks_eos_until_reached(hf_tokenizer):
    eos = frozenset({hf_tokenizer.eos_token_id})
    state = SequenceState(hf_tokenizer, (), SamplingParams(max_tokens=10, min_tokens=3), eos)
    blocked = []
    for token in encode(hf_tokenizer, "one two three four"):
        blocked.append(state.blocked_token_ids())
        state.append(token)
    assert blocked == [eos, eos, eos, frozenset()]


@pytest.mark.parametrize("stop", ["42", "is 4", "answer is 42."])
def test_stop_string_is_cut_and_never_streamed(hf_tokenizer, stop):
    """Whether the stop string is inside one token or spans several, nothing of it is ever sent."""
    text = "The answer is 42. Done, and then some more words."
    ids = encode(hf_tokenizer, text)
    state, deltas = feed(hf_tokenizer, ids, SamplingParams(max_tokens=len(ids), stop=(stop,)))
    expected = text[:text.index(stop)]
    assert state.finish_reason == "stop" and deltas[-1].finish_reason == "stop"
    assert streamed(deltas) == expected
    sent = ""
    for delta in deltas:  # what was sent is always a prefix of the answer: nothing to take back
        sent += delta.text
        assert expected.startswith(sent)
    assert len(state.token_ids) < len(ids)  # stopped early


def test_stop_string_spanning_tokens_is_really_split(hf_tokenizer):
    """The 'is 4' case above does cross a token boundary (so the hold-back path is exercised)."""
    pieces = [hf_tokenizer.decode([i]) for i in encode(hf_tokenizer, "The answer is 42.")]
    assert not any("is 4" in piece for piece in pieces), pieces


def test_earliest_stop_string_wins(hf_tokenizer):
    text = "alpha beta gamma delta"
    state, deltas = feed(hf_tokenizer, encode(hf_tokenizer, text), SamplingParams(max_tokens=20,
                                                                                stop=("delta", " beta")))
    assert streamed(deltas) == "alpha" and state.finish_reason == "stop"


def test_held_back_text_is_flushed_when_no_stop_matches(hf_tokenizer):
    text = "The answer is 42"
    ids = encode(hf_tokenizer, text)
    for finish_ids, reason in ((ids, "length"), (ids + [hf_tokenizer.eos_token_id], "stop")):
        state, deltas = feed(hf_tokenizer, finish_ids, SamplingParams(max_tokens=len(finish_ids),
                                                                      stop=("a long stop string",)))
        assert streamed(deltas) == text and state.finish_reason == reason


def test_stop_strings_before_min_tokens_are_ignored(hf_tokenizer):
    text = "stop here, then go on and stop again"
    ids = encode(hf_tokenizer, text)
    state, deltas = feed(hf_tokenizer, ids, SamplingParams(max_tokens=len(ids), min_tokens=4, stop=("stop",)))
    assert streamed(deltas) == "stop here, then go on and " and state.finish_reason == "stop"


# --------------------------------------------------------------------------- sampler


def test_greedy_picks_the_argmax_and_respects_blocked_tokens():
    logits = torch.tensor([0.1, 3.0, 2.0, -1.0])
    greedy = SamplingParams(max_tokens=1, temperature=0.0)
    assert sample_next_token(logits, greedy, None) == 1
    assert sample_next_token(logits, greedy, None, blocked=frozenset({1})) == 2


def test_sampling_never_picks_a_blocked_token():
    logits = torch.zeros(5)
    generator = torch.Generator().manual_seed(0)
    params = SamplingParams(max_tokens=1, temperature=1.0)
    picks = {sample_next_token(logits, params, generator, blocked=frozenset({0, 3})) for _ in range(200)}
    assert picks == {1, 2, 4}


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log()
    generator = torch.Generator().manual_seed(1)

    def picks(top_p: float) -> set[int]:
        params = SamplingParams(max_tokens=1, temperature=1.0, top_p=top_p)
        return {sample_next_token(logits, params, generator) for _ in range(300)}

    assert picks(0.5) == {0}
    assert picks(0.7) == {0, 1}
    assert picks(1.0) == {0, 1, 2}
    assert picks(1e-6) == {0}  # the most likely token is always kept


def test_same_seed_same_samples():
    logits = torch.randn(100, generator=torch.Generator().manual_seed(3))
    params = SamplingParams(max_tokens=1, temperature=1.5)

    def draw(seed: int) -> list[int]:
        generator = torch.Generator().manual_seed(seed)
        return [sample_next_token(logits, params, generator) for _ in range(30)]

    assert draw(11) == draw(11)
    assert draw(11) != draw(12)
