"""The tasks and their prompt sets: the registry (:mod:`.registry`, declarations in :mod:`.catalog`), raw data
(:mod:`.sources`), preprocessing (:mod:`.build`), generated tasks (:mod:`.generated`), command line (:mod:`.cli`).

The runner lists tasks with :func:`task_names` / :func:`default_task_names`, finds a task's locustfile and
default budget on :func:`get_task`, and calls :func:`ensure_datasets`; ``python datasets/prepare.py`` builds
the sets by hand.
"""

from llmload.core.records import DatasetError
from llmload.tasks.build import (DEFAULT_NUM, DEFAULT_SEED, BuiltSet, SetSummary, build_datasets, default_budgets,
                                 ensure_datasets, render, summarize_set, summary_table)
from llmload.tasks.registry import (BundledSource, GenerateRequest, HubSource, LocalFile, Task, TaskOption,
                                      TaskTemplate, all_tasks, default_task_names, get_task, hub_task_names,
                                      register, task_names, unregister)
from llmload.tasks.sources import RawItem, RawSource
from llmload.tasks import catalog  # noqa: E402,F401 - registers the suite's tasks

__all__ = [
    "DEFAULT_NUM", "DEFAULT_SEED", "BuiltSet", "BundledSource", "DatasetError",
    "GenerateRequest", "HubSource", "LocalFile", "RawItem", "RawSource", "SetSummary", "Task", "TaskOption",
    "TaskTemplate", "all_tasks", "build_datasets", "default_budgets", "default_task_names", "ensure_datasets",
    "get_task", "hub_task_names", "register", "render", "summarize_set", "summary_table", "task_names",
    "unregister",
]
