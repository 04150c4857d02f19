"""``python -m llmload.runner``: the comparison matrix (see :mod:`llmload.runner.cli`)."""

from llmload.runner.cli import main

raise SystemExit(main())
