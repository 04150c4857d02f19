"""The generated tasks on the embedded model's tokenizer: synthetic lengths, shared prefixes, conversations."""

from __future__ import annotations

import itertools
import json

import pytest

from llmload.core.records import read_records
from llmload.tasks import build_datasets, cli, get_task
from llmload.tasks.generated import PREFIX_HEAD

pytestmark = pytest.mark.unit


def ids(tokenizer, text: str, special: bool = True) -> list[int]:
    return tokenizer(text, add_special_tokens=special)["input_ids"]


def chat_ids(tokenizer, messages) -> list[int]:
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return ids(tokenizer, text, special=False)


def build(task: str, tmp_path, model: str, **settings):
    built, = build_datasets(task, source="bundled", model=model, out_dir=tmp_path, progress=False, **settings)
    assert read_records(built.path) == built.records
    return built.records


# ------------------------------------------------------------------ synthetic


def test_synthetic_range_ratio_zero_gives_every_prompt_exactly_n_tokens(tmp_path, default_model, tokenizer):
    records = build("synthetic", tmp_path, default_model, num=30, options={"input_len": 300})
    corpus = {item.id: item.text for item in get_task("synthetic").bundled.raw().items}
    assert len(records) == 30 and len({r.prompt for r in records}) == 30
    for r in records:
        assert r.input_tokens == len(ids(tokenizer, r.prompt)) == 300  # exact, as the server tokenises it
        assert r.metadata["chat_input_tokens"] == len(chat_ids(tokenizer, r.messages)) > 300
        assert r.messages == ({"role": "user", "content": r.prompt},) and r.max_tokens == 128
        first = corpus[r.metadata["source_ids"][0]]
        assert r.prompt.startswith(first[:50])  # running text from the corpus, not random token ids
        assert r.metadata["build"]["options"] == {"input_len": 300, "output_len": None, "range_ratio": 0.0}
    again = build("synthetic", tmp_path / "again", default_model, num=10, options={"input_len": 300})
    assert [r.prompt for r in again] == [r.prompt for r in records[:10]]  # seeded: a smaller num is a prefix


def test_synthetic_range_ratio_spreads_input_and_output_lengths(tmp_path, default_model, tokenizer):
    records = build("synthetic", tmp_path, default_model, num=40,
                    options={"input_len": 200, "range_ratio": 0.5, "output_len": 40})
    inputs, outputs = [r.input_tokens for r in records], [r.max_tokens for r in records]
    assert all(100 <= n <= 300 for n in inputs) and len(set(inputs)) > 20 and max(inputs) - min(inputs) > 100
    assert all(20 <= n <= 60 for n in outputs) and len(set(outputs)) > 10
    assert all(r.input_tokens == len(ids(tokenizer, r.prompt)) for r in records)
    assert {r.metadata["build"]["max_tokens"] for r in records} == {40}


# ------------------------------------------------------------------ prefix


def test_prefix_prompts_of_a_group_share_their_prefix_token_for_token(tmp_path, default_model, tokenizer):
    records = build("prefix", tmp_path, default_model, num=12, options={"prefix_len": 200, "prefix_groups": 3})
    groups = {g: [r for r in records if r.metadata["prefix_group"] == g] for g in range(3)}
    assert [len(members) for members in groups.values()] == [4, 4, 4]
    assert [r.metadata["prefix_group"] for r in records] == [0, 1, 2] * 4  # interleaved
    heads = []
    for members in groups.values():
        shared, chat_shared = members[0].metadata["prefix_tokens"], members[0].metadata["chat_prefix_tokens"]
        prompts = [ids(tokenizer, r.prompt) for r in members]
        chats = [chat_ids(tokenizer, r.messages) for r in members]
        for r, prompt, chat in zip(members, prompts, chats):
            assert r.metadata["prefix_tokens"] == shared > 200 and r.metadata["chat_prefix_tokens"] == chat_shared
            assert prompt[:shared] == prompts[0][:shared] and chat[:chat_shared] == chats[0][:chat_shared]
            assert r.input_tokens == len(prompt) and r.metadata["chat_input_tokens"] == len(chat)
            assert r.prompt.startswith(PREFIX_HEAD) and r.prompt.endswith("?\nAnswer:")
            document = r.prompt[len(PREFIX_HEAD):r.prompt.rindex("\n\nQuestion: ")]
            assert len(ids(tokenizer, document, special=False)) == 200 == r.metadata["document_tokens"]
        for a, b in itertools.combinations(range(len(members)), 2):  # distinct right after the shared part
            assert prompts[a][shared:] != prompts[b][shared:] and chats[a][chat_shared:] != chats[b][chat_shared:]
        heads.append(prompts[0][:shared])
    assert len({tuple(h) for h in heads}) == 3  # one document per group
    assert len({r.messages[0]["content"].rsplit("Question: ", 1)[1] for r in records}) == 12


# ------------------------------------------------------------------ conversation


def test_conversation_records_have_two_to_max_turns_and_fit_the_context(tmp_path, default_model, tokenizer):
    records = build("conversation", tmp_path, default_model, num=25, max_model_len=1024,
                    options={"max_turns": 3})
    conversations = {item.id: item.extra["turns"] for item in get_task("conversation").bundled.raw().items}
    assert len(records) == 25 and {len(r.turns) for r in records} <= {2, 3} and any(len(r.turns) == 3
                                                                                    for r in records)
    budget = 128

    def bound(turns: list[str]) -> int:
        """The stated rule: every user turn, the earlier answers at their budget (+4 tokens each), the last answer."""
        history = []
        for index, turn in enumerate(turns):
            history += [{"role": "assistant", "content": ""}] if index else []
            history.append({"role": "user", "content": turn})
        plain = "\n".join(f"User: {t}" + ("\nAssistant:" if i < len(turns) - 1 else "") for i, t in
                          enumerate(turns)) + "\nAssistant:"
        return max(len(chat_ids(tokenizer, history)), len(ids(tokenizer, plain))) + (len(turns) - 1) * (
            budget + 4) + budget

    for r in records:
        turns, available = list(r.turns), list(conversations[r.metadata["source_id"]])
        assert turns == available[:len(turns)]  # the user turns, in order
        assert r.messages == ({"role": "user", "content": turns[0]},) and r.max_tokens == budget
        assert r.prompt == f"User: {turns[0]}\nAssistant:" and r.input_tokens == len(ids(tokenizer, r.prompt))
        assert r.metadata["chat_input_tokens"] == len(chat_ids(tokenizer, r.messages))
        assert bound(turns) == r.metadata["context_tokens"] <= 1024
        if len(turns) < min(3, len(available)):  # cut short: one more turn would not fit
            assert bound(available[:len(turns) + 1]) > 1024
    json.dumps([list(r.turns) for r in records])


# ------------------------------------------------------------------ bad input: one line, exit status 2


def run_cli(capsys, *args: str) -> tuple[int, list[str]]:
    try:
        code = cli.main(["--source", "bundled", "--no-progress", *args])
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip().splitlines()


@pytest.mark.parametrize("args, line", [
    (("--tasks", "synthetic", "--input-len", "2000"),
     "error: --input-len 2000: the longest prompt (2000 tokens, 2030 with the chat template) plus its output "
     "budget (128) must fit --max-model-len 2048: at most 1890"),
    (("--tasks", "synthetic", "--input-len", "1500", "--range-ratio", "0.5", "--output-len", "100"),
     "error: --input-len 1500: the longest prompt (2250 tokens, 2280 with the chat template) plus its output "
     "budget (150) must fit --max-model-len 2048: at most 1245 with --range-ratio 0.5"),
    (("--tasks", "synthetic", "--input-len", "500", "--max-model-len", "512"),
     "error: --input-len 500: the longest prompt (500 tokens, 530 with the chat template) plus its output "
     "budget (128) must fit --max-model-len 512: at most 354"),
    (("--tasks", "prefix", "--prefix-len", "3000"),
     "error: --prefix-len 3000: the shared prefix, a question (up to 48 tokens) and the output budget (64) must "
     "fit --max-model-len 2048: at most 1885"),
    (("--tasks", "prefix", "--prefix-groups", "101"),
     "error: --prefix-groups 101: more groups than prompts (--num 100): at most 100"),
    (("--tasks", "conversation", "--num", "50000"),
     "error: --num 50000: the sharegpt source has only 7398 conversations of 2 or more user turns: at most 7398"),
    (("--tasks", "conversation", "--max-tokens", "conversation=1500"),
     "error: --max-tokens conversation=1500: two turns, each with its output budget, must fit --max-model-len "
     "2048: at most 998"),
    (("--tasks", "qa", "--prefix-len", "64"),
     "error: --prefix-len is an option of the prefix task, which is not among the tasks to build: add prefix "
     "to --tasks"),
    (("--tasks", "synthetic", "--output-len", "64", "--max-tokens", "synthetic=32"),
     "error: --output-len 64 and --max-tokens synthetic=32 disagree: give one of them"),
    (("--range-ratio", "1"),
     "error: argument --range-ratio: '1' is not a number >= 0 and < 1"),
    (("--max-turns", "1"),
     "error: argument --max-turns: '1' is not an integer >= 2"),
    (("--input-len", "0"),
     "error: argument --input-len: '0' is not an integer >= 1"),
])
def test_bad_input_is_one_line_naming_the_option_and_the_limit(capsys, tmp_path, default_model, args, line):
    code, lines = run_cli(capsys, "--out", str(tmp_path / "sets"), *args)
    assert (code, lines) == (2, [line])
    assert not (tmp_path / "sets").exists()


def test_limits_in_the_messages_are_the_real_limits(capsys, tmp_path, default_model, tokenizer):
    """The largest accepted values build; one more is refused."""
    out = str(tmp_path / "sets")
    assert run_cli(capsys, "--tasks", "synthetic", "--num", "2", "--input-len", "1890", "--out", out)[0] == 0
    records = read_records(tmp_path / "sets" / "synthetic.jsonl")
    assert all(r.metadata["chat_input_tokens"] + r.max_tokens == 2048 for r in records)
    assert run_cli(capsys, "--tasks", "synthetic", "--num", "2", "--input-len", "1891", "--out", out)[0] == 2
    assert run_cli(capsys, "--tasks", "prefix", "--num", "2", "--prefix-groups", "1", "--prefix-len", "1885",
                   "--out", out)[0] == 0
    assert run_cli(capsys, "--tasks", "prefix", "--num", "2", "--prefix-len", "1886", "--out", out)[0] == 2
