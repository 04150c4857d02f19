"""The locustfiles' command line: bad input gives one clear line, never a traceback; options are discoverable."""

from __future__ import annotations

import subprocess
import sys

from locust_helpers import locust_command, output, run_locust
from llmload.core.paths import REPO_ROOT

NO_SERVER = "http://127.0.0.1:9"  # never contacted: these runs stop before any request


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_missing_prompt_file_says_how_to_build_it(tmp_path):
    proc = run_locust("qa.py", NO_SERVER, "--requests", "1", env={"LLMLOAD_DATA_DIR": str(tmp_path / "none")})
    log = output(proc)
    assert proc.returncode != 0 and "Traceback" not in log
    assert last_line(log) == (f"error: prompt file {tmp_path / 'none' / 'qa.jsonl'} not found: build it with "
                              "`make data` (python datasets/prepare.py) or pass --dataset PATH")


def test_unreadable_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    proc = run_locust("chat.py", NO_SERVER, "--dataset", str(bad))
    assert proc.returncode != 0 and "Traceback" not in output(proc)
    assert last_line(output(proc)).startswith(f"error: cannot read prompts: {bad}:1: not a prompt record")


def test_bad_option_value_is_rejected_by_the_parser():
    proc = run_locust("chat.py", NO_SERVER, "--requests", "-3")  # (each type is unit-tested in test_loadgen_options)
    assert proc.returncode == 2 and "argument --requests: '-3' is not an integer >= 0" in last_line(output(proc))


def test_monitor_needs_somewhere_to_write():
    proc = run_locust("chat.py", NO_SERVER, "--monitor-pid", "1")
    assert last_line(output(proc)) == ("error: --monitor-pid needs --csv PREFIX or --raw-log PATH (to know where "
                                       "to write the monitor CSV)")


def test_the_folder_holds_one_user_class_per_task_and_options_are_listed():
    proc = subprocess.run(locust_command("", NO_SERVER, "--list"), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)
    listed = {line.strip() for line in proc.stdout.splitlines()[1:]}
    files = sorted((REPO_ROOT / "locustfiles").glob("*.py"))
    assert {"ChatUser", "SummarizationUser", "QAUser", "CodeUser"} <= listed and len(listed) == len(files)
    help_text = subprocess.run([sys.executable, "-m", "llmload.loadgen"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=60).stdout
    for flag, env in (("--mode", "LOCUST_LLM_MODE"), ("--requests", "LOCUST_LLM_REQUESTS"),
                      ("--api-key", "LOCUST_LLM_API_KEY")):
        assert flag in help_text and env in help_text
