"""``python -m llmload.tasks``: the same command as ``python datasets/prepare.py``."""

from llmload.tasks.cli import main

raise SystemExit(main())
