"""The test tiers: every test has exactly one, and a ``unit`` test starts no process.

``unit``: no server, no Locust, no subprocess, no model weights (threads,
in-process HTTP servers and the tokenizer are fine); ``integration``: starts
processes (servers on the mock engine or the real model, Locust, the commands)
or runs the model in this process; ``e2e``: vLLM or the browser. A test gets its
tier from its module's ``pytestmark`` or, in a file that mixes tiers, from its
own decorator; a test with none, or with two, fails the collection (so ``-m
unit`` selects exactly the unit tier). While a ``unit`` test sets up, runs and
tears down, starting a process raises :class:`ProcessInUnitTest` and fails the
test, even where the code under test catches the error. See docs/testing.md.
"""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
from contextlib import contextmanager

import pytest

TIERS = ("unit", "integration", "e2e")


class ProcessInUnitTest(AssertionError):
    """A ``unit`` test tried to start a process."""


def tier_of(item: pytest.Item) -> str | None:
    """The test's tier; None unless it has exactly one."""
    names = {m.name for m in item.iter_markers() if m.name in TIERS}
    return names.pop() if len(names) == 1 else None


def check_tiers(items: list[pytest.Item]) -> None:
    """Fail the collection if a test has no tier, or more than one."""
    wrong = [f"{item.nodeid}: {sorted({m.name for m in item.iter_markers() if m.name in TIERS}) or 'none'}"
             for item in items if tier_of(item) is None]
    if wrong:
        raise pytest.UsageError("every test has exactly one tier marker (unit, integration or e2e; see "
                                "docs/testing.md); these do not:\n  " + "\n  ".join(wrong))


@contextmanager
def no_processes(nodeid: str):
    """Within: any way of starting a process raises :class:`ProcessInUnitTest`; yields the list of attempts."""
    attempts: list[str] = []

    def refuse(what: str):
        def refused(*args, **kwargs):
            detail = _command(args)
            attempts.append(f"{what}{detail}")
            raise ProcessInUnitTest(f"{nodeid} is a unit test and started a process ({what}{detail}); "
                                    "mark it integration (docs/testing.md)")
        return refused

    patches = [(subprocess.Popen, "_execute_child", refuse("subprocess")), (os, "fork", refuse("os.fork")),
               (os, "forkpty", refuse("os.forkpty")), (os, "system", refuse("os.system")),
               (os, "posix_spawn", refuse("os.posix_spawn")), (os, "posix_spawnp", refuse("os.posix_spawnp")),
               (_posixsubprocess, "fork_exec", refuse("fork_exec"))]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches if hasattr(owner, name)]
    for owner, name, replacement in patches:
        if hasattr(owner, name):
            setattr(owner, name, replacement)
    try:
        yield attempts
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _command(args: tuple) -> str:
    """The command of a refused subprocess call, when there is one: ``: python -m server``."""
    for arg in args:
        if isinstance(arg, (list, tuple)) and arg and all(isinstance(a, (str, bytes, os.PathLike)) for a in arg):
            return ": " + " ".join(os.fsdecode(a) for a in arg)[:200]
        if isinstance(arg, str):
            return ": " + arg[:200]
    return ""


def guarded_phase(item: pytest.Item):
    """Wrap one phase (setup, call, teardown) of ``item``: a unit test's phase fails if it started a process."""
    if tier_of(item) != "unit":
        return (yield)
    with no_processes(item.nodeid) as attempts:
        result = yield
    if attempts:
        raise ProcessInUnitTest(f"{item.nodeid} is a unit test and started a process ({attempts[0]}); "
                                "mark it integration (docs/testing.md)")
    return result
