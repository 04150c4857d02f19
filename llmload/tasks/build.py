"""Preprocessing: raw items -> sampled, length-checked :class:`~llmload.core.records.PromptRecord` sets.

Each task is looked up in the registry (:mod:`llmload.tasks.registry`). For a
raw-text task, every raw text gets the task's instruction and is rendered in
both API styles: a completion ``prompt`` and chat ``messages``. Both forms are
counted with the model's own tokenizer, exactly as the basic server counts them
(the completion text with special tokens; the chat template's text without),
and prompt plus output budget must fit the model's context: texts of a task
that truncates are cut to fit, other items that do not fit are left out.
Sampling is seeded and deterministic: the candidates are shuffled once per
(task, seed) and taken in that order until ``num`` are accepted, so a smaller
``num`` gives a prefix of a larger one. Generated tasks build their records
with their own hook (:mod:`llmload.tasks.generated`).
"""

from __future__ import annotations

import itertools
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from llmload.core.defaults import MAX_MODEL_LEN
from llmload.core.metrics import percentile
from llmload.core.model_store import resolve_model
from llmload.core.paths import dataset_path
from llmload.core.records import DatasetError, PromptRecord, RecordFormatError, read_records, write_records
from llmload.core.tables import render as render_table
from llmload.tasks.registry import GenerateRequest, Task, all_tasks, get_task, task_names
from llmload.tasks.sources import RawSource, hub_unreachable_reason
from llmload.tasks.tokens import TokenCounter, tokenizer_name

DEFAULT_NUM = 100
DEFAULT_SEED = 0
BATCH_SIZE = 64
SOURCES = ("auto", "bundled", "hf")
Log = Callable[[str], None]

def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def render(task: str, text: str) -> tuple[str, tuple[dict, ...]]:
    """The completion prompt and the chat messages of one raw text of ``task``."""
    return get_task(task).render(text)


def default_budgets() -> dict[str, int]:
    """The default output budget (``max_tokens``) of every registered task."""
    return {t.name: t.max_tokens for t in all_tasks()}


# --------------------------------------------------------------------------- selection

@dataclass
class SelectionStats:
    """What happened to the candidates of one task."""

    candidates: int = 0
    duplicates: int = 0
    too_long: int = 0
    too_short: int = 0
    truncated: int = 0


def normalised(text: str) -> str:
    """``text`` up to case and spaces (the duplicate test)."""
    return re.sub(r"\s+", " ", text).strip().casefold()


def shuffled(items: Sequence, task: str, seed: int) -> list:
    """``items`` in the task's seeded order (the same for every process and platform)."""
    order = list(items)
    random.Random(f"{task}:{seed}").shuffle(order)  # str seeds are stable across processes
    return order


def _overheads(task: Task, counter: TokenCounter) -> tuple[int, int]:
    """Tokens the template adds around a text, in the completion and chat forms (estimates up to a merge)."""
    probe = "hello"
    prompt, messages = task.render(probe)
    n_probe = counter.prompt_tokens([probe])[0]
    return counter.prompt_tokens([prompt])[0] - n_probe, (counter.chat_tokens([messages])[0] or 0) - n_probe


def _cut(text: str, offsets: Sequence[tuple[int, int]], keep_tokens: int) -> str:
    """The prefix of ``text`` that holds its first ``keep_tokens`` tokens."""
    return text if keep_tokens >= len(offsets) else text[:offsets[keep_tokens - 1][1]].rstrip()


def sample(records: Iterable[PromptRecord], num: int, task: str, progress: bool = True) -> list[PromptRecord]:
    """The first ``num`` of ``records`` (all, when fewer), under a progress bar; a generator is asked for no more."""
    from tqdm.auto import tqdm

    taken = []
    with tqdm(total=num, desc=f"{task:<13}", unit="prompt", disable=not progress, file=sys.stderr,
              dynamic_ncols=True) as bar:
        for record in itertools.islice(records, num):
            taken.append(record)
            bar.update(1)
    return taken


def select_records(task: Task, raw: RawSource, counter: TokenCounter, stats: SelectionStats, *, seed: int,
                   max_tokens: int, max_model_len: int, build: dict | None = None) -> Iterator[PromptRecord]:
    """The records of ``task`` from ``raw`` whose prompt plus ``max_tokens`` fits the context, in the seeded order
    (:func:`sample` takes the first ``num``); what was left out is counted in ``stats``.

    Each raw text is tokenized once (with offsets, to cut it at a token boundary);
    the prompt and chat forms that are kept are counted exactly.
    """
    template = task.template
    limit = max_model_len - max_tokens  # the most input tokens a request may have
    overhead = max(_overheads(task, counter))
    margin = 4  # tokens may merge differently where the template meets the text
    seen_texts, seen_ids = set(), set()
    order = shuffled(raw.items, task.name, seed)
    for start in range(0, len(order), BATCH_SIZE):
        batch = []
        for item in order[start:start + BATCH_SIZE]:
            key = normalised(item.text)
            if key in seen_texts or item.id in seen_ids:
                stats.duplicates += 1
                continue
            seen_texts.add(key)
            seen_ids.add(item.id)
            batch.append(item)
        candidates = []  # (item, text to render, cut already)
        for item, offsets in zip(batch, counter.text_offsets([item.text for item in batch]) if batch else []):
            if len(offsets) < template.min_text_tokens:
                stats.too_short += 1
            elif len(offsets) + overhead <= limit + margin:  # fits, or nearly: the exact count decides
                candidates.append((item, item.text, False))
            elif template.truncate and limit - overhead - margin >= template.min_text_tokens:
                candidates.append((item, _cut(item.text, offsets, limit - overhead - margin), True))
            else:
                stats.too_long += 1
        if not candidates:
            continue
        rendered = [task.render(text) for _, text, _ in candidates]
        prompt_counts = counter.prompt_tokens([prompt for prompt, _ in rendered])
        chat_counts = counter.chat_tokens([messages for _, messages in rendered])
        for (item, text, truncated), (prompt, messages), n_prompt, n_chat in zip(
                candidates, rendered, prompt_counts, chat_counts):
            if max(n_prompt, n_chat or 0) > limit:
                fitted = _truncate_to_fit(task, text, counter, limit) if template.truncate else None
                if fitted is None:
                    stats.too_long += 1
                    continue
                text, (prompt, messages), n_prompt, n_chat = fitted
                truncated = True
            stats.truncated += truncated
            metadata = {"source_id": item.id, "chat_input_tokens": n_chat, "truncated": truncated}
            if truncated:
                metadata["original_text_chars"] = len(item.text)
            metadata.update(item.extra)
            metadata["build"] = dict(build or {})
            yield PromptRecord(id=f"{task.name}:{item.id}", task=task.name, source=raw.name, prompt=prompt,
                               messages=messages, max_tokens=max_tokens, input_tokens=n_prompt,
                               reference=item.reference, metadata=metadata)


def _truncate_to_fit(task: Task, text: str, counter: TokenCounter, limit: int):
    """Cut ``text`` further until both forms fit ``limit``: ``(text, rendered, n_prompt, n_chat)`` or None."""
    offsets = counter.text_offsets([text])[0]
    keep = len(offsets)
    for _ in range(4):
        prompt, messages = task.render(_cut(text, offsets, keep))
        n_prompt, n_chat = counter.prompt_tokens([prompt])[0], counter.chat_tokens([messages])[0]
        over = max(n_prompt, n_chat or 0) - limit
        if over <= 0:
            return _cut(text, offsets, keep), (prompt, messages), n_prompt, n_chat
        keep -= over + 2
        if keep < task.template.min_text_tokens:
            return None
    return None


# --------------------------------------------------------------------------- summary

@dataclass(frozen=True)
class SetSummary:
    """One line of the summary table."""

    task: str
    source: str
    count: int
    input_min: int | None
    input_median: float | None
    input_max: int | None
    max_tokens: str  # "128", or "64-128" when the records differ
    truncated: int


def summarize_set(records: Sequence[PromptRecord], task: str = "") -> SetSummary:
    """Count, input tokens min/median/max and output budget of a built set."""
    tokens = [r.input_tokens for r in records]
    budgets = sorted({r.max_tokens for r in records})
    budget = "" if not budgets else str(budgets[0]) if len(budgets) == 1 else f"{budgets[0]}-{budgets[-1]}"
    sources = sorted({r.source for r in records})
    return SetSummary(task=task or (records[0].task if records else ""), source=",".join(sources),
                      count=len(records), input_min=min(tokens, default=None),
                      input_median=percentile(tokens, 50) if tokens else None, input_max=max(tokens, default=None),
                      max_tokens=budget, truncated=sum(bool(r.metadata.get("truncated")) for r in records))


SUMMARY_COLUMNS = ("task", "source", "count", "input tokens min", "median", "max", "output budget", "truncated")


def summary_rows(summaries: Iterable[SetSummary]) -> list[tuple[str, ...]]:
    """The summary table's cells as text, one tuple per set."""
    def num(value) -> str:
        return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)

    return [(s.task, s.source, str(s.count), num(s.input_min), num(s.input_median), num(s.input_max),
             s.max_tokens or "-", str(s.truncated)) for s in summaries]


def summary_table(summaries: Iterable[SetSummary]) -> str:
    """A Markdown table (input lengths in tokens of the model's tokenizer), readable as plain text."""
    return render_table(summary_rows(summaries), SUMMARY_COLUMNS)


# --------------------------------------------------------------------------- building sets

@dataclass
class BuiltSet:
    """A task's prompt set on disk and how it came about."""

    task: str
    path: Path
    records: list[PromptRecord]
    asked: int
    kept: bool = False  # an existing file was reused
    stats: SelectionStats = field(default_factory=SelectionStats)

    @property
    def summary(self) -> SetSummary:
        return summarize_set(self.records, self.task)


def parse_tasks(tasks: str | Iterable[str] | None) -> list[str]:
    """Validated task names (default: every registered task), in the given order without repeats."""
    if tasks is None:
        return list(task_names())
    items = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip()]
    unknown = [t for t in items if t not in task_names()]
    if unknown or not items:
        raise DatasetError(f"unknown task(s) {', '.join(unknown) or '(none given)'}: choose from "
                           f"{', '.join(task_names())}")
    return list(dict.fromkeys(items))


def output_budgets(overrides: dict[str, int] | None, max_model_len: int, tasks: Iterable[str] | None = None
                   ) -> dict[str, int]:
    """Per-task ``max_tokens``: the defaults with ``overrides``; those of ``tasks`` are checked against the context."""
    budgets = default_budgets()
    for task, value in (overrides or {}).items():
        if task not in budgets:
            raise DatasetError(f"--max-tokens: unknown task {task!r}: choose from {', '.join(budgets)}")
        budgets[task] = value
    for task in (budgets if tasks is None else tasks):
        value = budgets[task]
        if not 1 <= value < max_model_len:
            raise DatasetError(f"--max-tokens {task}={value}: must be at least 1 and below --max-model-len "
                               f"{max_model_len}")
    return budgets


def task_options(tasks: Sequence[str], given: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Each task's option values (its declared defaults, updated with ``given``, keyed by ``dest``).

    An option given for a task that is not built is an error (it would be silently ignored).
    """
    given = {k: v for k, v in (given or {}).items() if v is not None}
    owners = {o.dest: (t, o) for t in map(get_task, task_names()) for o in t.options}
    unknown = [k for k in given if k not in owners]
    if unknown:
        raise DatasetError(f"unknown task option(s) {', '.join(unknown)}")
    for dest in given:
        task, option = owners[dest]
        if task.name not in tasks:
            raise DatasetError(f"{option.flag} is an option of the {task.name} task, which is not among the tasks "
                               f"to build: add {task.name} to --tasks")
    return {name: {o.dest: given.get(o.dest, o.default) for o in get_task(name).options} for name in tasks}


def apply_budget_options(budgets: dict[str, int], overrides: dict[str, int], options: dict[str, dict[str, Any]],
                         max_model_len: int) -> None:
    """Set the budget of the tasks that have a budget option (``--output-len``) given."""
    for name, values in options.items():
        for option in get_task(name).options:
            value = values.get(option.dest)
            if not option.budget or value is None:
                continue
            if name in overrides and overrides[name] != value:
                raise DatasetError(f"{option.flag} {value} and --max-tokens {name}={overrides[name]} disagree: "
                                   f"give one of them")
            if not 1 <= value < max_model_len:
                raise DatasetError(f"{option.flag} {value}: must be at least 1 and below --max-model-len "
                                   f"{max_model_len}")
            budgets[name] = value


def resolve_source_kinds(tasks: Sequence[str], source: str, data_files: dict[str, str], log: Log) -> dict[str, str]:
    """``bundled``, ``local`` or ``hf`` per task.

    ``auto`` means hf when the hub answers; a local data file means hf; a task
    without a hub dataset always uses its own source.
    """
    if source not in SOURCES:
        raise DatasetError(f"unknown source {source!r}: choose from {', '.join(SOURCES)}")
    for name in data_files:
        task = get_task(name)
        if task.hub is None:
            raise DatasetError(f"--data-files {name}=...: the {name} task has no Hugging Face dataset: choose from "
                               f"{', '.join(t for t in task_names() if get_task(t).hub)}")
    hub_tasks = [t for t in tasks if t not in data_files and get_task(t).hub is not None]
    kind = source
    if source != "bundled" and hub_tasks:
        reason = hub_unreachable_reason(get_task(hub_tasks[0]).hub.path)
        if reason and source == "hf":
            raise DatasetError(f"the Hugging Face hub is unreachable ({reason}): use --source bundled, or give "
                               f"local copies with --data-files TASK=PATH")
        if source == "auto":
            kind = "bundled" if reason else "hf"
            if reason:
                log(f"note: the Hugging Face hub is unreachable ({reason}): using the bundled datasets")
    kinds = {}
    for name in tasks:
        task = get_task(name)
        kinds[name] = "hf" if name in data_files or (kind == "hf" and task.hub is not None) else task.bundled.kind
    return kinds


def load_raw(task: str, kind: str, data_file: str | None = None, cache_dir: str | None = None) -> RawSource:
    """The raw items of ``task`` from its ``hf`` source (hub or local ``data_file``) or its own (bundled/local)."""
    spec = get_task(task)
    return spec.hub.raw(data_file, cache_dir=cache_dir) if kind == "hf" else spec.bundled.raw()


def _rebuild_reason(path: Path, task: str, want: dict, exact: bool) -> str | None:
    """None when the set at ``path`` can be kept; otherwise why it must be (re)built."""
    if not path.is_file():
        return "missing"
    try:
        records = read_records(path)
    except (RecordFormatError, OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc})"
    if not records:
        return "empty"
    builds = [r.metadata.get("build") for r in records]
    if any(r.task != task for r in records) or any(b != builds[0] for b in builds) or not isinstance(builds[0], dict):
        return "not built by this command"
    have = builds[0]
    if have.get("tokenizer") != want["tokenizer"]:
        return f"built for the tokenizer of {have.get('tokenizer')}"
    if not isinstance(have.get("max_model_len"), int) or have["max_model_len"] > want["max_model_len"]:
        return f"built for a context of {have.get('max_model_len')} tokens"
    if exact:
        for key in ("num", "seed", "max_tokens", "source", "options"):
            if key == "source" and (want["source"] == "auto" or get_task(task).hub is None):
                continue  # auto: whatever was reachable; no hub dataset: only one source
            if have.get(key) != want.get(key):
                return f"built with {key} {have.get(key)} (asked {want.get(key)})"
        if have.get("max_model_len") != want["max_model_len"]:
            return f"built for a context of {have.get('max_model_len')} tokens"
    return None


def build_datasets(tasks: str | Iterable[str] | None = None, *, source: str = "auto", num: int = DEFAULT_NUM,
                   seed: int = DEFAULT_SEED, model: str | None = None, max_model_len: int = MAX_MODEL_LEN,
                   max_tokens: dict[str, int] | None = None, data_files: dict[str, str] | None = None,
                   options: dict[str, Any] | None = None, out_dir: str | Path | None = None, force: bool = False,
                   exact: bool = True, progress: bool = True, cache_dir: str | None = None,
                   log: Log = _stderr) -> list[BuiltSet]:
    """Build (or keep) the prompt set of each task (default: all registered) and write one JSONL per task atomically.

    ``options`` are the generated tasks' options by ``dest`` (``{"input_len": 256}``).
    An existing file is kept unless ``force``, or it was built for another tokenizer
    or a larger context, or (``exact``) with other settings. A task with fewer usable
    prompts than ``num`` is written smaller with a warning; with none it is an error.
    Every check runs before any file is written.
    """
    tasks = parse_tasks(tasks)
    if num < 1:
        raise DatasetError(f"--num {num}: must be at least 1")
    budgets = output_budgets(max_tokens, max_model_len, tasks)
    values = task_options(tasks, options)
    apply_budget_options(budgets, dict(max_tokens or {}), values, max_model_len)
    data_files = dict(data_files or {})
    model_path = resolve_model(model)
    name = tokenizer_name(model_path)
    plan = {}
    for task in tasks:
        path = dataset_path(task, Path(out_dir) if out_dir else None)
        want = {"tokenizer": name, "max_model_len": max_model_len, "num": num, "seed": seed,
                "max_tokens": budgets[task], "source": source}
        if values[task]:
            want["options"] = values[task]
        reason = "--force" if force else _rebuild_reason(path, task, want, exact)
        plan[task] = (path, want, reason)
    todo = [t for t in tasks if plan[t][2] is not None]
    kinds = resolve_source_kinds(todo, source, {t: f for t, f in data_files.items() if t in todo}, log) if todo else {}
    raws = {task: load_raw(task, kinds[task], data_files.get(task), cache_dir) for task in todo}  # bad input first
    counter = TokenCounter.load(model_path) if todo else None
    if counter is not None and not counter.has_chat_template:
        log(f"warning: {name} has no chat template: only the completion form is checked against the context")
    requests = {}
    for task in todo:
        spec, (path, want, _) = get_task(task), plan[task]
        if spec.generated:
            requests[task] = GenerateRequest(task=spec, counter=counter, num=num, seed=seed, max_tokens=budgets[task],
                                             max_model_len=max_model_len, options=values[task],
                                             build={**want, "source": kinds[task]})
            if spec.check is not None:
                spec.check(raws[task], requests[task])
    built = []
    for task in tasks:
        path, want, reason = plan[task]
        if reason is None:
            built.append(BuiltSet(task, path, read_records(path), asked=num, kept=True))
            continue
        raw, spec = raws[task], get_task(task)
        if reason != "missing":
            log(f"{task}: rebuilding {path.name} ({reason})")
        stats = SelectionStats(candidates=len(raw.items))
        candidates = spec.generate(raw, requests[task]) if spec.generated else select_records(
            spec, raw, counter, stats, seed=seed, max_tokens=budgets[task], max_model_len=max_model_len,
            build={**want, "source": kinds[task]})
        records = sample(candidates, num, task, progress)
        if not records:
            raise DatasetError(f"{task}: none of the {stats.candidates} items of {raw.name} is usable "
                               f"({stats.too_long} too long, {stats.too_short} too short, {stats.duplicates} "
                               f"duplicates): raise --max-model-len or lower --max-tokens {task}=N")
        if len(records) < num:
            detail = "" if spec.generated else (f"; {stats.too_long} too long, {stats.too_short} too short, "
                                                f"{stats.duplicates} duplicates")
            log(f"warning: {task}: only {len(records)} usable prompts in {raw.name} (asked {num}{detail}): "
                f"writing {len(records)}")
        write_records(path, records)
        built.append(BuiltSet(task, path, records, asked=num, stats=stats))
    return built


def ensure_datasets(tasks: str | Iterable[str] | None = None, data_dir: str | Path | None = None,
                    model: str | None = None, **options) -> dict[str, Path]:
    """The prompt set file of each task, building those that are missing or unusable for ``model``.

    Existing sets are kept whatever their num/seed/budgets/options as long as they were
    built for the same tokenizer and a context no larger than ``max_model_len`` (default
    2048). ``options`` are those of :func:`build_datasets`. Raises :class:`DatasetError`.
    """
    options.setdefault("exact", False)
    built = build_datasets(tasks, model=model, out_dir=data_dir, **options)
    return {b.task: b.path for b in built}
