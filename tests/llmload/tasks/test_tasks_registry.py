"""The task registry: lookups, declarations, and a throwaway task on a local file through the build and Locust."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from llmload.core.rawlog import read_results
from llmload.core.paths import REPO_ROOT
from llmload.core.records import DatasetError, read_records
from llmload.runner.matrix import Runner
from llmload.runner.options import parse_settings
from llmload.tasks import (LocalFile, Task, TaskTemplate, all_tasks, build_datasets, default_budgets,
                           default_task_names, get_task, hub_task_names, register, task_names, unregister)
from llmload.tasks import build, cli

from prompt_copies import write_jsonl

HAIKU_TOPICS = ["autumn rain on a tin roof", "a cat asleep in the sun", "the last train home",
                "snow on a mountain lake", "a kettle starting to sing"]

LOCUSTFILE = '''"""Locust load for the haiku task (a throwaway task of the registry test)."""

from llmload.loadgen.user import LLMUser


class HaikuUser(LLMUser):
    task_name = "haiku"
'''


@pytest.fixture
def haiku(tmp_path):
    """A task declared on a tiny local JSONL file, with its locustfile beside it; unregistered afterwards."""
    source = write_jsonl(tmp_path / "topics.jsonl",
                         [{"slug": f"t{i}", "topic": topic, "example": f"haiku {i}"} for i, topic in
                          enumerate(HAIKU_TOPICS)])
    locustfile = tmp_path / "haiku.py"
    locustfile.write_text(LOCUSTFILE)
    task = register(Task("haiku", "haikus on a topic", max_tokens=24,
                         bundled=LocalFile(source, text_field="topic", reference_field="example", id_field="slug"),
                         template=TaskTemplate("Write a haiku about the topic.", "{instruction}\nTopic: {text}\nHaiku:",
                                               "{instruction}\nTopic: {text}"),
                         locustfile=locustfile, in_default_matrix=False))
    yield task
    unregister("haiku")


@pytest.mark.unit
def test_the_suite_declares_seven_tasks_two_in_the_default_matrix():
    assert task_names() == ("chat", "summarization", "qa", "code", "synthetic", "prefix", "conversation")
    assert default_task_names() == ("qa", "code")  # summarization and chat: too slow and too noisy for it
    assert hub_task_names() == ("chat", "summarization", "qa", "code")
    assert default_budgets() == {"chat": 256, "summarization": 128, "qa": 32, "code": 192, "synthetic": 128,
                                 "prefix": 64, "conversation": 128}
    for task in all_tasks():
        assert task.locustfile == REPO_ROOT / "llmload" / "locustfiles" / f"{task.name}.py"  # in the package
        assert (REPO_ROOT / "locustfiles" / f"{task.name}.py").resolve() == task.locustfile  # the root link
        assert task.generated == (task.name in ("synthetic", "prefix", "conversation"))
    for name in ("chat", "summarization", "qa", "code", "synthetic", "prefix"):
        source = get_task(name).locustfile.read_text()
        assert f'task_name = "{name}"' in source and len(source.splitlines()) <= 12


@pytest.mark.unit
def test_unknown_task_is_one_line_listing_the_known_ones():
    with pytest.raises(DatasetError) as caught:
        get_task("poetry")
    assert str(caught.value) == ("unknown task 'poetry': choose from chat, summarization, qa, code, synthetic, "
                                 "prefix, conversation")


@pytest.mark.unit
def test_declarations_that_cannot_work_are_refused(tmp_path):
    template = TaskTemplate("", "{text}", "{text}")
    source = LocalFile(tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="already registered"):
        register(Task("chat", "again", 8, source, template))
    with pytest.raises(ValueError, match="task name 'Bad Name'"):
        register(Task("Bad Name", "", 8, source, template))
    with pytest.raises(ValueError, match="exactly one of template"):
        register(Task("neither", "", 8, source))
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        register(Task("empty", "", 0, source, template))
    assert "neither" not in task_names() and "empty" not in task_names()


@pytest.mark.unit
def test_a_registered_task_reaches_every_lookup_and_the_command_line(haiku, tmp_path):
    assert get_task("haiku") is haiku and task_names()[-1] == "haiku" and "haiku" not in default_task_names()
    assert build.parse_tasks("haiku,qa") == ["haiku", "qa"] and default_budgets()["haiku"] == 24
    parser = cli.build_parser()
    args = parser.parse_args(["--tasks", "haiku", "--max-tokens", "haiku=12"])
    assert args.tasks == ["haiku"] and args.max_tokens == [("haiku", 12)]
    assert "haiku: haikus on a topic" in " ".join(parser.format_help().split())
    with pytest.raises(SystemExit):
        parser.parse_args(["--data-files", "haiku=x.jsonl"])  # no hub dataset


@pytest.mark.integration
def test_throwaway_task_goes_through_the_build_and_a_real_locust_run(haiku, tmp_path, tokenizer, default_model,
                                                                     server_factory):
    built, = build_datasets("haiku", model=default_model, out_dir=tmp_path / "sets", progress=False)
    records = read_records(built.path)
    assert built.path == tmp_path / "sets" / "haiku.jsonl" and records == built.records
    assert [r.metadata["source_id"] for r in sorted(records, key=lambda r: r.id)] == [f"t{i}" for i in range(5)]
    for r in records:
        topic = r.prompt.split("Topic: ")[1].split("\n")[0]
        assert r.task == "haiku" and r.source == "file:topics.jsonl" and topic in HAIKU_TOPICS
        assert r.prompt == f"Write a haiku about the topic.\nTopic: {topic}\nHaiku:" and r.max_tokens == 24
        assert r.input_tokens == len(tokenizer(r.prompt)["input_ids"])  # counted with the embedded tokenizer
        assert r.reference == f"haiku {HAIKU_TOPICS.index(topic)}"
        assert r.metadata["build"]["source"] == "local"

    url = server_factory("mock", "--mock-ttft-ms", "5", "--mock-itl-ms", "1")
    raw_log = tmp_path / "haiku_requests.jsonl"
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", str(haiku.locustfile), "--headless", "-u", "1",
                           "-r", "1", "--requests", "3", "--dataset", str(built.path), "-H", url,
                           "--raw-log", str(raw_log), "--only-summary"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = read_results(raw_log)
    assert len(results) == 3 and all(r.success and r.task == "haiku" for r in results), results
    assert [r.prompt_id for r in results] == [r.id for r in records[:3]]  # file order
    assert all(r.output_tokens and r.output_tokens <= 24 for r in results)

    # ... and through the runner (its locustfile found in the registry) into the report
    run_dir = tmp_path / "run"
    args = parse_settings(["--servers", "mock", "--tasks", "haiku", "--modes", "stream", "--concurrency", "2",
                           "--requests", "4", "--max-tokens", "6", "--mock-ttft-ms", "5", "--mock-itl-ms", "1",
                           "--data-dir", str(tmp_path / "sets"), "--repeat", "1", "--out", str(run_dir)])
    assert Runner(args).run() == 0
    with (run_dir / "report" / "summary.csv").open(newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["server"], row["task"], row["status"], row["requests"], row["failures"]) == (
        "mock", "haiku", "ok", "4", "0")
    assert "haiku" in (run_dir / "report" / "summary.md").read_text()


@pytest.mark.unit
def test_local_file_sources(tmp_path):
    array = tmp_path / "rows.json"
    array.write_text(json.dumps([{"text": "first"}, {"text": "  "}, {"text": "third", "lang": "en"}]))
    items = LocalFile(array).raw().items
    assert [(i.id, i.text, i.extra) for i in items] == [("0", "first", {}), ("2", "third", {"lang": "en"})]
    cases = [
        ("missing.jsonl", None, "missing.jsonl: no such file"),
        ("bad.jsonl", '{"text": "a"}\n{"text": \n', "bad.jsonl:2: not valid JSON"),
        ("nofield.jsonl", '{"body": "a"}\n', "nofield.jsonl:1: no 'text' field holding a string"),
        ("object.json", '{"text": "a"}', "object.json: a .json file must hold an array of objects"),
        ("scalar.jsonl", '"just a string"\n', "scalar.jsonl:1: not a JSON object"),
    ]
    for name, content, message in cases:
        if content is not None:
            (tmp_path / name).write_text(content)
        with pytest.raises(DatasetError, match=message):
            LocalFile(tmp_path / name).raw()
