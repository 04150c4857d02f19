"""Every command the README shows exists and parses: modules answer --help, make targets and files exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
CODE = "\n".join(re.findall(r"```(?:bash)?\n(.*?)```", README, flags=re.S)) + "\n" + \
    "\n".join(re.findall(r"`([^`\n]+)`", README))

# vLLM's own entry point takes a minute to print its help; the vLLM cell test starts it for real.
MODULES = sorted(m for m in set(re.findall(r"python -m ([a-z_][\w.]*)", CODE)) - {"venv", "pip"}
                 if not m.startswith("vllm."))
MAKE_TARGETS = sorted(set(re.findall(r"\bmake ([a-z][\w-]*)", CODE)))
PATHS = sorted(set(re.findall(r"\b((?:locustfiles|datasets|scripts|server|reports|monitors|llmload)/[\w./-]+\.(?:py|sh|md))",
                              README)))


def test_the_readme_names_commands():
    assert {"llmload.runner", "server", "server.vllm_launcher", "reports.merge", "monitors"} <= set(MODULES)
    assert {"compare", "test", "quick", "data", "model"} <= set(MAKE_TARGETS)


@pytest.mark.parametrize("module", MODULES)
def test_module_commands_answer_help(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "usage" in proc.stdout.lower() or "options" in proc.stdout.lower()


def test_dataset_script_answers_help():
    proc = subprocess.run([sys.executable, "datasets/prepare.py", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "--source" in proc.stdout, proc.stderr


def test_make_targets_exist():
    makefile = (REPO / "Makefile").read_text()
    for target in MAKE_TARGETS:
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.M), f"make {target} is not in the Makefile"


@pytest.mark.parametrize("path", PATHS)
def test_files_the_readme_names_exist(path):
    assert (REPO / path).exists(), path


def test_datasets_is_not_a_package():
    assert not (REPO / "datasets" / "__init__.py").exists()
