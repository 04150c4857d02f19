"""``python -m llmload``: the ``llmload`` command (:mod:`llmload.cli`) without installing the package."""

from llmload.cli import main

raise SystemExit(main())
