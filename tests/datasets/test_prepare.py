"""``datasets/``: a folder of data and one script, never a Python package shadowing Hugging Face ``datasets``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from llmload.core.paths import REPO_ROOT


@pytest.mark.unit
def test_datasets_folder_is_not_a_package():
    assert (REPO_ROOT / "datasets" / "prepare.py").is_file()
    assert not (REPO_ROOT / "datasets" / "__init__.py").exists()


@pytest.mark.integration
def test_import_datasets_finds_hugging_face_from_the_repository_root():
    code = "import datasets, sys; print(datasets.__file__); print(hasattr(datasets, 'load_dataset'))"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    path, has_loader = result.stdout.split()
    assert "site-packages" in path and has_loader == "True", result.stderr


@pytest.mark.integration
def test_prepare_runs_from_any_folder(tmp_path):
    result = subprocess.run([sys.executable, str(REPO_ROOT / "datasets" / "prepare.py"), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("usage: python datasets/prepare.py")


@pytest.mark.integration
def test_the_readme_documents_every_task_and_only_real_flags(tmp_path):
    from llmload.tasks import task_names

    readme = (REPO_ROOT / "datasets" / "README.md").read_text()
    result = subprocess.run([sys.executable, str(REPO_ROOT / "datasets" / "prepare.py"), "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    for task in task_names():
        assert f"\n| {task} |" in readme, task  # a row of the tasks table
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", readme))
    assert {"--input-len", "--range-ratio", "--prefix-len", "--prefix-groups", "--max-turns"} <= flags
    assert sorted(f for f in flags if f not in result.stdout) == []
