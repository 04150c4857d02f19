"""Where the suite keeps what it builds: models, datasets and run results (all git-ignored)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Materialised model directories (``LLMLOAD_MODELS_DIR`` overrides).
MODELS_DIR = Path(os.environ.get("LLMLOAD_MODELS_DIR", REPO_ROOT / "models"))
#: Built prompt sets, one JSONL per task (``LLMLOAD_DATA_DIR`` overrides).
DATA_DIR = Path(os.environ.get("LLMLOAD_DATA_DIR", REPO_ROOT / "datasets" / "data"))
#: One folder per experiment run (``LLMLOAD_RESULTS_DIR`` overrides).
RESULTS_DIR = Path(os.environ.get("LLMLOAD_RESULTS_DIR", REPO_ROOT / "results"))



def dataset_path(task: str, data_dir: Path | None = None) -> Path:
    """The JSONL file that holds the built prompt set of ``task``."""
    return Path(data_dir or DATA_DIR) / f"{task}.jsonl"
