"""``python -m llmload.runner``: the comparison matrix (see :mod:`llmload.runner.matrix`)."""

from llmload.runner.matrix import main

raise SystemExit(main())
