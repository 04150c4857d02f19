"""The four tasks' prompt sets: raw data (:mod:`.sources`), preprocessing (:mod:`.build`), command line (:mod:`.cli`).

The runner calls :func:`ensure_datasets`; ``python datasets/prepare.py`` builds them by hand.
"""

from llmload.tasks.build import (DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_TOKENS, DEFAULT_NUM, DEFAULT_SEED, TEMPLATES,
                                   BuiltSet, SetSummary, build_datasets, ensure_datasets, render, summarize_set,
                                   summary_table)
from llmload.tasks.sources import HF_DATASETS, DatasetError, RawItem, RawSource

__all__ = [
    "DEFAULT_MAX_MODEL_LEN", "DEFAULT_MAX_TOKENS", "DEFAULT_NUM", "DEFAULT_SEED", "HF_DATASETS", "TEMPLATES",
    "BuiltSet", "DatasetError", "RawItem", "RawSource", "SetSummary", "build_datasets", "ensure_datasets",
    "render", "summarize_set", "summary_table",
]
