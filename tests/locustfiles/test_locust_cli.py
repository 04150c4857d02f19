"""The locustfiles' command line: bad input gives one clear line, never a traceback; options are discoverable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from locust_helpers import locust_command, output, run_locust, serving, write_prompts
from llmload.core.paths import REPO_ROOT
from llmload.core.services import port_in_use
from llmload.targets.basic import basic_server_command
from llmload.tasks import get_task, task_names

#: Commands run to completion, no wall-clock bound: beside the serial part at idle CPU priority (docs/testing.md).
pytestmark = [pytest.mark.integration, pytest.mark.background]

NO_SERVER = "http://127.0.0.1:9"  # never contacted: these runs stop before any request


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_missing_prompt_file_says_how_to_build_it(tmp_path):
    proc = run_locust("qa.py", NO_SERVER, "--requests", "1", env={"LLMLOAD_DATA_DIR": str(tmp_path / "none")})
    log = output(proc)
    assert proc.returncode == 2 and "Traceback" not in log
    assert last_line(log) == (f"error: prompt file {tmp_path / 'none' / 'qa.jsonl'} not found: build it with "
                              "`make data` (python datasets/prepare.py) or pass --dataset PATH")


def test_unreadable_prompt_file_names_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    proc = run_locust("chat.py", NO_SERVER, "--dataset", str(bad))
    assert proc.returncode != 0 and "Traceback" not in output(proc)
    assert last_line(output(proc)).startswith(f"error: cannot read prompts: {bad}:1: not a prompt record")


@pytest.mark.parametrize("args, message", [
    (("--requests", "-3"), "error: argument --requests: '-3' is not an integer >= 0"),
    (("--rate", "0"), "error: argument --rate: '0' is not a number > 0"),
    (("--rate", "fast"), "error: argument --rate: 'fast' is not a number > 0"),
    (("--rate", "2", "--arrival", "weibull"), "error: argument --arrival: invalid choice: 'weibull' (choose from "
                                              "'constant', 'poisson', 'gamma')"),
    (("--slo", "latency=5"), "error: argument --slo: 'latency=5' is not KEY=MS with KEY one of ttft, tpot, e2e, itl"),
    (("--slo", "ttft=0"), "error: argument --slo: ttft='0': a target is a positive number of milliseconds"),
    (("--requests", "5", "--warmup", "5"), "error: --warmup 5 must be smaller than --requests 5"),
    (("--burstiness", "0.5"), "error: --arrival and --burstiness shape an open loop: give --rate R too"),
    (("--price-per-hour", "-1"), "error: argument --price-per-hour: '-1' is not a price in USD per hour (a number > 0"),
    (("--price-per-hour", "cheap"), "error: argument --price-per-hour: 'cheap' is not a price in USD per hour"),
    (("--cancel-rate", "1.5"), "error: argument --cancel-rate: '1.5' is not a share of requests in [0, 1]"),
    (("--cancel-rate", "0.3", "--cancel-after", "soon"), "error: argument --cancel-after: 'soon' is not a cancel "
                                                         "point"),
])
def test_bad_options_are_one_line_with_exit_code_2_before_anything_starts(args, message):
    proc = run_locust("chat.py", NO_SERVER, *args)  # (each type is unit-tested in test_loadgen_options)
    lines = output(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), lines


def test_monitor_needs_somewhere_to_write():
    proc = run_locust("chat.py", NO_SERVER, "--monitor-pid", "1")
    assert last_line(output(proc)) == ("error: --monitor-pid needs --csv PREFIX or --raw-log PATH (to know where "
                                       "to write the monitor CSV)")


def test_the_folder_holds_one_user_class_per_task_and_options_are_listed():
    proc = subprocess.run(locust_command("", NO_SERVER, "--list"), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)
    listed = {line.strip() for line in proc.stdout.splitlines()[1:]}
    files = sorted(path.resolve() for path in (REPO_ROOT / "locustfiles").glob("[!_]*.py"))  # the link, resolved
    assert {"ChatUser", "SummarizationUser", "QAUser", "CodeUser"} <= listed and len(listed) == len(files)
    assert sorted(get_task(name).locustfile for name in task_names()) == files  # one locustfile per task
    help_text = subprocess.run([sys.executable, "-m", "llmload.loadgen"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=60).stdout
    for flag, env in (("--mode", "LOCUST_LLM_MODE"), ("--requests", "LOCUST_LLM_REQUESTS"),
                      ("--api-key", "LOCUST_LLM_API_KEY")):
        assert flag in help_text and env in help_text


DESIGN_CARD = ["locust", "-f", "locustfiles/chat.py", "--headless", "-u", "8"]  # verbatim: host from locust.conf


def design_card(env: dict, timeout: float = 90) -> subprocess.CompletedProcess:
    """The design card's command as typed (``locust`` from this environment), with the suite's env vars only."""
    command = [str(Path(sys.executable).with_name("locust")), *DESIGN_CARD[1:]]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env})


@pytest.fixture
def port_8000():
    if port_in_use(8000):
        pytest.skip("something already listens on port 8000 (the design card's address)")
    return 8000


def test_the_design_card_command_works_verbatim_against_the_basic_server(port_8000, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    cmd = basic_server_command("mock", port_8000, extra=["--mock-ttft-ms", "20", "--mock-itl-ms", "2"])
    with serving("basic server on 8000", cmd, port_8000, tmp_path / "server.log"):
        proc = design_card({"LOCUST_LLM_REQUESTS": "16", "LOCUST_LLM_DATASET": str(prompts),
                            "LOCUST_LLM_MAX_TOKENS": "4"})
    log = output(proc)
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert "llmload: 16 requests, 0 failed" in log  # served by the server on 8000, the host in locust.conf


@pytest.mark.slow
def test_the_design_card_command_without_a_server_ends_with_one_line(port_8000, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    proc = design_card({"LOCUST_LLM_DATASET": str(prompts)}, timeout=60)
    log = output(proc)
    assert proc.returncode != 0 and "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "error:" in line]
    assert len(lines) == 1 and "no server answered at http://localhost:8000 (connection refused): start it " \
                                "first" in lines[0]


def test_no_host_at_all_is_one_line(tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    proc = subprocess.run([sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "locustfiles" / "chat.py"),
                           "--headless", "--config", os.devnull, "--dataset", str(prompts)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and last_line(output(proc)) == (
        "error: no server to load: pass -H http://host:port (or set host = ... in locust.conf)")


def test_a_raw_log_that_cannot_be_written_is_one_line_with_exit_code_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    proc = run_locust("chat.py", NO_SERVER, "--requests", "1", "--raw-log", str(blocker / "run_requests.jsonl"),
                      "--dataset", str(write_prompts(tmp_path / "p.jsonl")), "--model", "mock")
    errors = [line for line in output(proc).splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in output(proc), output(proc)[-2000:]
    assert len(errors) == 1 and errors[0].startswith(f"error: cannot write the raw log {blocker / 'run_requests.jsonl'}")
