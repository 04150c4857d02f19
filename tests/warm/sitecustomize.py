"""Tests only (on ``PYTHONPATH`` from scripts/run_tests.sh): ``python -m locust`` starts warm (:mod:`llmload_warm`)."""

import os as _os
import sys as _sys

if _os.environ.get("LLMLOAD_WARM_LOCUST"):  # llmload_warm.ENV: checked first, so that without it nothing is imported
    import llmload_warm as _warm

    _module = _warm.wanted(_sys.orig_argv)
    if _module:
        _warm.run_warm(_module)  # exits as the warm child does; returns where it cannot: a cold start
