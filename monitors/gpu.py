"""GPU readings through NVML (``nvidia-ml-py``, module ``pynvml``).

:func:`open_gpu_probe` returns a :class:`GpuProbe` when NVML works and at
least one GPU is visible, else ``None`` and the one-line reason, so the
sampler can leave its GPU columns empty instead of failing. The NVML module is
injectable (``open_gpu_probe(nvml=fake)``): tests pass a stand-in object with
the same functions.

Per-process GPU memory comes from NVML's compute and graphics process lists.
Those lists carry host PIDs: inside a container with its own PID namespace
they do not match the PIDs seen here, and the server's GPU memory then reads 0;
the probe says so once (``notices``) when it sees listed PIDs that do not exist
here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Iterable

import psutil

MIB = 1024 * 1024


@dataclass
class GpuReading:
    """One GPU at one instant; ``None`` where NVML could not tell."""

    index: int
    used_mib: float | None
    total_mib: float | None
    util_pct: float | None
    #: Memory of the given process set on this GPU (None: no set given, or NVML could not tell).
    server_mib: float | None


class GpuProbe:
    """Reads memory, utilisation and per-process memory of every GPU through an NVML module."""

    def __init__(self, nvml: Any):
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        #: One-line notices raised while reading (each at most once); the sampler prints and clears them.
        self.notices: list[str] = []
        self._namespace_noticed = False

    @property
    def count(self) -> int:
        return len(self.handles)

    def _call(self, fn_name: str, handle) -> Any:
        try:
            return getattr(self.nvml, fn_name)(handle)
        except self.nvml.NVMLError:
            return None

    def _process_memory(self, handle) -> dict[int, int | None] | None:
        """PID -> used GPU bytes (None: not available) over the compute and graphics lists; None on error."""
        by_pid: dict[int, int | None] = {}
        listed = False
        for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            procs = self._call(fn_name, handle)
            if procs is None:
                continue
            listed = True
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                # A process may be in both lists: keep the larger figure, not the sum.
                if proc.pid not in by_pid or (used is not None and (by_pid[proc.pid] or 0) < used):
                    by_pid[proc.pid] = used
        return by_pid if listed else None

    def _check_namespace(self, pids: Iterable[int]) -> None:
        if self._namespace_noticed:
            return
        unseen = [pid for pid in pids if not psutil.pid_exists(pid)]
        if unseen:
            self._namespace_noticed = True
            self.notices.append(f"NVML lists GPU processes with PIDs not visible here ({unseen[:3]}): "
                                "in a container with its own PID namespace the server's GPU memory reads 0")

    def read(self, server_pids: set[int] | None) -> list[GpuReading]:
        """One reading per GPU; ``server_mib`` sums the memory of ``server_pids`` on that GPU."""
        readings = []
        for index, handle in enumerate(self.handles):
            memory = self._call("nvmlDeviceGetMemoryInfo", handle)
            util = self._call("nvmlDeviceGetUtilizationRates", handle)
            server_mib = None
            if server_pids is not None:
                by_pid = self._process_memory(handle)
                if by_pid is not None:
                    self._check_namespace(by_pid)
                    mine = [used for pid, used in by_pid.items() if pid in server_pids]
                    server_mib = None if None in mine else sum(mine) / MIB
            readings.append(GpuReading(
                index=index,
                used_mib=memory.used / MIB if memory is not None else None,
                total_mib=memory.total / MIB if memory is not None else None,
                util_pct=float(util.gpu) if util is not None else None,
                server_mib=server_mib,
            ))
        return readings

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def open_gpu_probe(nvml: Any = None) -> tuple[GpuProbe | None, str | None]:
    """``(probe, None)`` when NVML sees at least one GPU, else ``(None, reason)``; never raises."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "pynvml (nvidia-ml-py) is not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... or a broken binding
        return None, f"NVML unavailable ({exc or type(exc).__name__})"
    try:
        probe = GpuProbe(nvml)
    except Exception as exc:
        return None, f"NVML could not list GPUs ({exc or type(exc).__name__})"
    if probe.count == 0:
        probe.close()
        return None, "NVML sees no GPU"
    return probe, None
