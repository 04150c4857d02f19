"""``python -m llmload.prompts``: the same command as ``python datasets/prepare.py``."""

from llmload.prompts.cli import main

raise SystemExit(main())
