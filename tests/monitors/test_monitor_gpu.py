"""NVML probe: readings from the NVML stand-in, error paths, and the real library without a GPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from monitors.gpu import open_gpu_probe

pytestmark = pytest.mark.unit

MIB = 1024 * 1024


def invisible_pid() -> int:
    """A PID no process can have (above the kernel's limit)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_two_gpus_memory_utilisation_and_server_processes(fake_nvml, two_gpu_config):
    me, parent = os.getpid(), os.getppid()
    fake_nvml.configure(two_gpu_config(server_pid=me, server_child_pid=parent, other_pid=1))
    probe, reason = open_gpu_probe(fake_nvml)
    assert reason is None and probe.count == 2
    gpu0, gpu1 = probe.read(server_pids={me, parent})
    assert (gpu0.index, gpu0.used_mib, gpu0.total_mib, gpu0.util_pct) == (0, 10240, 81920, 37)
    assert gpu0.server_mib == 6144  # listed as compute and graphics: counted once
    assert (gpu1.used_mib, gpu1.util_pct, gpu1.server_mib) == (2048, 5, 1536)
    assert [r.server_mib for r in probe.read(server_pids=None)] == [None, None]
    assert [r.server_mib for r in probe.read(server_pids={12345678})] == [0, 0]
    assert probe.notices == []  # every listed PID exists here
    probe.close()
    assert fake_nvml.calls == ["nvmlInit", "nvmlShutdown"]


def test_unsupported_queries_give_empty_values(fake_nvml):
    me = os.getpid()
    fake_nvml.configure({"gpus": [{"total": 1024 * MIB, "used": 512 * MIB, "util": None,
                                   "compute": [[me, None]]}]})
    probe, _ = open_gpu_probe(fake_nvml)
    (reading,) = probe.read(server_pids={me})
    assert reading.used_mib == 512 and reading.util_pct is None
    assert reading.server_mib is None  # NVML listed the server but could not tell its memory


def test_pids_from_another_namespace_give_one_notice(fake_nvml):
    fake_nvml.configure({"gpus": [{"total": MIB, "used": MIB, "util": 1, "compute": [[invisible_pid(), MIB]]}]})
    probe, _ = open_gpu_probe(fake_nvml)
    for _ in range(3):
        assert probe.read(server_pids={os.getpid()})[0].server_mib == 0
    assert len(probe.notices) == 1 and "PID namespace" in probe.notices[0]


@pytest.mark.parametrize("config, expected", [
    ({"gpus": [], "init_error": "Driver Not Loaded"}, "NVML unavailable (Driver Not Loaded)"),
    ({"gpus": []}, "NVML sees no GPU"),
])
def test_nvml_failures_are_reasons_not_errors(fake_nvml, config, expected):
    fake_nvml.configure(config)
    assert open_gpu_probe(fake_nvml) == (None, expected)


def test_missing_pynvml_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert open_gpu_probe() == (None, "pynvml (nvidia-ml-py) is not installed")


def test_real_pynvml_reads_gpus_or_gives_a_reason():
    pytest.importorskip("pynvml")
    probe, reason = open_gpu_probe()
    if probe is None:  # no GPU / driver here
        assert reason.startswith("NVML")
        return
    try:
        readings = probe.read(server_pids={os.getpid()})
        assert len(readings) == probe.count >= 1
        assert all(r.total_mib > 0 and 0 <= r.used_mib <= r.total_mib for r in readings)
    finally:
        probe.close()
