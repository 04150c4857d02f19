"""``llmload``: the suite's one command. Each subcommand is one of its programs, called with the arguments after it.

    llmload run --quick                  the comparison matrix (same as python -m llmload.runner)
    llmload serve --engine mock          the basic server (same as python -m server)
    llmload locust chat -- -u 8 -t 60s   Locust on the packaged chat locustfile

A subcommand declares no option of its own: ``llmload SUB --help`` is its
program's help, and an option added to a program is there at once.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from llmload import __version__
from llmload.core.cliargs import print_error


@dataclass(frozen=True)
class Command:
    """A subcommand: the program it runs (``module:function``, called with the argument list) and its equivalent."""

    name: str
    target: str
    same_as: str
    summary: str


COMMANDS = (
    Command("run", "llmload.runner.cli:main", "python -m llmload.runner", "the comparison matrix and its report"),
    Command("tune", "llmload.runner.tune:main", "python -m llmload.runner.tune",
            "server configurations ranked by capacity at an SLO"),
    Command("report", "reports.merge:main", "python -m reports.merge", "a run folder's report: tables, ratios, plots"),
    Command("compare", "reports.compare:main", "python -m reports.compare", "two run folders compared cell by cell"),
    Command("explain", "reports.explain:main", "python -m reports.explain", "where a run's latency went, by part"),
    Command("prepare", "llmload.tasks.cli:main", "python -m llmload.tasks", "the prompt sets, one JSONL per task"),
    Command("serve", "server.__main__:main", "python -m server", "the basic server (naive, batched or mock engine)"),
    Command("vllm", "server.vllm_launcher:main", "python -m server.vllm_launcher", "vLLM with the suite's settings"),
    Command("monitor", "monitors.__main__:main", "python -m monitors", "CPU, memory, GPU and /metrics into a CSV"),
    Command("model", "llmload.core.model_store:main", "python -m llmload.core.model_store",
            "materialise the embedded default model"),
    Command("locust", "llmload.cli:run_locust", "locust -f locustfiles/TASK.py", "Locust on a task's locustfile"),
    Command("locustfile", "llmload.cli:print_locustfiles", "", "the path of a task's packaged locustfile"),
)
BY_NAME = {c.name: c for c in COMMANDS}
HELP = ("-h", "--help")


class CommandError(Exception):
    """Bad input to the dispatcher itself: one line, exit code 2."""


def usage() -> str:
    name = max(len(c.name) for c in COMMANDS)
    summary = max(len(c.summary) for c in COMMANDS)
    lines = ["usage: llmload COMMAND [ARGS...]    (llmload --version: the version)", "",
             "Load-test OpenAI-compatible LLM servers with Locust: the basic server against vLLM, or any server by "
             "URL.", "", "commands (each takes the options of the program on its right: llmload COMMAND --help):"]
    lines += [f"  {c.name:<{name}}  {c.summary:<{summary}}  {c.same_as}".rstrip() for c in COMMANDS]
    lines += ["", "models/, datasets/data/ and results/ are in the repository (a checkout) or in the current folder "
                  "(an installed package);", "LLMLOAD_MODELS_DIR, LLMLOAD_DATA_DIR and LLMLOAD_RESULTS_DIR override "
                  f"them. llmload {__version__}"]
    return "\n".join(lines)


def unknown(name: str) -> CommandError:
    close = difflib.get_close_matches(name, list(BY_NAME), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return CommandError(f"unknown command {name!r}{hint}: choose from {', '.join(BY_NAME)}")


# --------------------------------------------------------------------------- the packaged locustfiles

def locustfile_of(task: str) -> Path:
    """The path of ``task``'s locustfile, from the task registry; :class:`CommandError` for an unknown task."""
    from llmload.tasks import DatasetError, get_task  # the registry: only for these two commands

    try:
        return get_task(task).locustfile
    except DatasetError as exc:
        raise CommandError(str(exc)) from None


def locust_usage() -> str:
    from llmload.tasks import task_names  # the registry: only for this help

    return ("usage: llmload locust TASK [--] [LOCUST OPTIONS]\n\n"
            f"Runs Locust on TASK's packaged locustfile (TASK: {', '.join(task_names())}); the same as "
            "`locust -f \"$(llmload locustfile TASK)\" [LOCUST OPTIONS]`. A locust.conf in the current folder is read "
            "as usual. `llmload locust TASK --help` prints Locust's own options; the suite's follow.\n")


def run_locust(argv: list[str]) -> int:
    """``llmload locust TASK [--] ARGS``: this process becomes ``python -m locust -f <TASK's locustfile> ARGS``."""
    if not argv or argv[0] in HELP:
        print(locust_usage(), flush=True)
        from llmload.loadgen.__main__ import main as loadgen_options  # Locust: only to list the suite's options

        loadgen_options()
        return 0
    task, rest = argv[0], argv[1:]
    path = locustfile_of(task)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "locust", "-f", str(path), *rest])
    return 0  # not reached: exec replaces this process


def print_locustfiles(argv: list[str]) -> int:
    """``llmload locustfile [TASK ...]``: the path of each task's locustfile (every task's, ``task<TAB>path``)."""
    from llmload.tasks import task_names  # the registry: only for this command

    if argv[:1] and argv[0] in HELP:
        print("usage: llmload locustfile [TASK ...]\n\nPrints the path of each TASK's packaged locustfile, one a "
              "line (without TASK: every task, 'TASK<TAB>PATH'), e.g. locust -f \"$(llmload locustfile chat)\".")
        return 0
    for task in argv:
        if task.startswith("-"):
            raise CommandError(f"unknown option {task!r}: llmload locustfile takes task names")
    paths = [locustfile_of(task) for task in argv]  # every name checked before anything is printed
    print("\n".join(map(str, paths)) if argv else "\n".join(f"{t}\t{locustfile_of(t)}" for t in task_names()))
    return 0


# --------------------------------------------------------------------------- dispatch

def missing_dependency(command: str, exc: ModuleNotFoundError) -> str:
    """One line for a subcommand that needs a package that is not installed, with the extra that brings it."""
    module = (exc.name or "").split(".")[0]
    wanted = re.sub(r"[-_.]+", "-", module).lower()
    try:
        requires = metadata.requires("llmload") or []
    except metadata.PackageNotFoundError:
        requires = []
    extras = []
    for requirement in requires:
        name = re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement)[0]).lower()
        extra = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", requirement)
        if name == wanted and extra and extra[1] not in extras:
            extras.append(extra[1])
    if not extras:
        return f"llmload {command} needs the Python module {module!r}, which is not installed"
    others = "".join(f" (or [{e}])" for e in extras[1:])
    return f"llmload {command} needs {module}, which is not installed: pip install 'llmload[{extras[0]}]'{others}"


def call(command: Command, argv: list[str]) -> int:
    """Run ``command``'s program on ``argv`` as if it had been started as ``llmload NAME ARGV``."""
    module, _, function = command.target.partition(":")
    saved, sys.argv = sys.argv, [f"llmload {command.name}", *argv]  # what the program's own messages read
    try:
        result = getattr(importlib.import_module(module), function)(argv)
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] in ("llmload", "server", "monitors", "reports"):
            raise
        raise CommandError(missing_dependency(command.name, exc)) from None
    finally:
        sys.argv = saved
    return 0 if result is None else int(result)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if not args or args[0] in HELP:
            print(usage())
            return 0
        if args[0] == "--version":
            print(f"llmload {__version__}")
            return 0
        if args[0] == "help":
            if len(args) == 1:
                print(usage())
                return 0
            args = [args[1], "--help"]
        command = BY_NAME.get(args[0])
        if command is None:
            raise unknown(args[0])
        return call(command, args[1:])
    except CommandError as exc:
        return print_error(str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (llmload --help | head): stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1

