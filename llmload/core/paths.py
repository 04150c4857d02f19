"""Where the suite keeps what it builds: models, datasets and run results (in a checkout: git-ignored)."""

from __future__ import annotations

import os
from pathlib import Path

#: The folder that holds the packages: the repository root in a checkout, site-packages once installed.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: True in a source checkout (the repository's pyproject.toml beside the packages), False in an installed wheel.
IN_CHECKOUT = (REPO_ROOT / "pyproject.toml").is_file()
#: Where models/, datasets/data/ and results/ go: the checkout, or the current folder for an installed suite.
WORK_DIR = REPO_ROOT if IN_CHECKOUT else Path.cwd()

#: Materialised model directories (``LLMLOAD_MODELS_DIR`` overrides).
MODELS_DIR = Path(os.environ.get("LLMLOAD_MODELS_DIR", WORK_DIR / "models"))
#: Built prompt sets, one JSONL per task (``LLMLOAD_DATA_DIR`` overrides).
DATA_DIR = Path(os.environ.get("LLMLOAD_DATA_DIR", WORK_DIR / "datasets" / "data"))
#: One folder per experiment run (``LLMLOAD_RESULTS_DIR`` overrides).
RESULTS_DIR = Path(os.environ.get("LLMLOAD_RESULTS_DIR", WORK_DIR / "results"))


def dataset_path(task: str, data_dir: Path | None = None) -> Path:
    """The JSONL file that holds the built prompt set of ``task``."""
    return Path(data_dir or DATA_DIR) / f"{task}.jsonl"
