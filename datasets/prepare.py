#!/usr/bin/env python
"""Build the prompt sets into datasets/data/ (one JSONL per task): ``python datasets/prepare.py --help``.

A thin wrapper around :mod:`llmload.tasks.cli`. This folder is deliberately
not a Python package (it must never get an ``__init__.py``): ``import datasets``
has to find Hugging Face ``datasets``.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from llmload.tasks.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
