"""The tasks the runner can load-test, from the task registry (:mod:`llmload.tasks.registry`).

The one place the runner looks tasks up: their names, the default set, and each one's locustfile.
"""

from __future__ import annotations

from pathlib import Path

from llmload.tasks import default_task_names, get_task, task_names


def names() -> tuple[str, ...]:
    """Every task name ``--tasks`` accepts."""
    return tuple(task_names())


def default_tasks() -> list[str]:
    """The tasks a run covers when ``--tasks`` is not given."""
    return list(default_task_names())


def locustfile(task: str) -> Path:
    """The locustfile whose user class sends ``task``'s prompts."""
    return Path(get_task(task).locustfile)
