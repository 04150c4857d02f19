"""Fixtures for the monitor tests: real process trees and the NVML stand-in."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

FAKE_NVML_DIR = Path(__file__).parent / "fake_nvml"
MIB = 1024 * 1024

# The grandchild holds ``argv[1]`` MiB of touched memory, says "ready", then sleeps or spins.
GRANDCHILD = r"""
import sys, time
data = b"\x01" * (int(sys.argv[1]) << 20)
print("ready", flush=True)
if sys.argv[2] == "spin":
    while True:
        pass
time.sleep(600)
"""
# The child starts the grandchild, prints its PID once it is ready, then waits.
CHILD = r"""
import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3]],
                              stdout=subprocess.PIPE, text=True)
assert grandchild.stdout.readline().strip() == "ready"
print(grandchild.pid, flush=True)
grandchild.wait()
"""


def spawn_tree(alloc_mib: int = 0, spin: bool = False) -> SimpleNamespace:
    """A real two-level process tree (python child -> python grandchild holding ``alloc_mib``)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, GRANDCHILD, str(alloc_mib), "spin" if spin else "sleep"],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild_pid = int(child.stdout.readline())
    return SimpleNamespace(pid=child.pid, grandchild_pid=grandchild_pid, process=child)


def kill_tree(tree: SimpleNamespace) -> None:
    try:
        os.killpg(tree.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    tree.process.wait()
    tree.process.stdout.close()


@pytest.fixture
def process_tree():
    """``process_tree(alloc_mib=..., spin=...)`` spawns a tree, killed after the test."""
    trees = []

    def start(alloc_mib: int = 0, spin: bool = False) -> SimpleNamespace:
        trees.append(spawn_tree(alloc_mib, spin))
        return trees[-1]

    yield start
    for tree in trees:
        kill_tree(tree)


@pytest.fixture(scope="module")
def memory_tree():
    """One tree whose grandchild holds 200 MiB, shared by a module's tests."""
    tree = spawn_tree(alloc_mib=200)
    yield tree
    kill_tree(tree)


@pytest.fixture
def fake_nvml():
    """The NVML stand-in module, loaded fresh (``fake_nvml.configure({...})``)."""
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_NVML_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def two_gpu_config():
    """``two_gpu_config(server_pid, server_child_pid, other_pid)``: the NVML stand-in's config for two GPUs."""
    return _two_gpu_config


def _two_gpu_config(server_pid: int, server_child_pid: int, other_pid: int) -> dict:
    """Two 80 GiB GPUs: the server uses 6 GiB on GPU 0 (listed as compute and graphics) and its child 1.5 GiB
    on GPU 1; ``other_pid`` 1 GiB on GPU 0; both have an energy counter (standing still). Expected: used
    10240+2048 MiB, server 6144+1536 MiB."""
    return {"gpus": [
        {"total": 81920 * MIB, "used": 10240 * MIB, "util": 37, "energy_mj": 5_000_000,
         "compute": [[server_pid, 6144 * MIB], [other_pid, 1024 * MIB]],
         "graphics": [[server_pid, 6144 * MIB]]},
        {"total": 81920 * MIB, "used": 2048 * MIB, "util": 5, "energy_mj": 7_000_000,
         "compute": [[server_child_pid, 1536 * MIB]]},
    ]}
