"""Energy counters: the GPUs' through NVML, the CPU packages' through RAPL (Linux powercap), in joules.

The monitor records each counter as a cumulative column of its CSV, joules
since the monitor's first sample:

    gpu_energy_j   NVML's total energy of every GPU (nvmlDeviceGetTotalEnergyConsumption, mJ since the
                   driver loaded; Volta and later), summed over GPUs
    cpu_energy_j   RAPL's package zones (``/sys/class/powercap/intel-rapl:N``, named ``package-*``) and
                   their ``dram`` subzones, summed; each ``energy_uj`` wraps at ``max_energy_range_uj``

:func:`open_energy_probes` returns the probes that work here and, when none
does, the one-line reason; :func:`energy_between` gives the joules a column
counted between two instants (the reports divide them by tokens and requests).
Both counters measure whole devices: the GPU's every process, the CPU package's
every process (the load generator's too, on a machine that runs both).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

#: Where Linux exposes RAPL; ``LLMLOAD_POWERCAP`` names another folder of the same layout (a stand-in in tests).
POWERCAP = Path("/sys/class/powercap")
#: The monitor's energy columns, in the order the reports prefer them.
ENERGY_COLUMNS = ("gpu_energy_j", "cpu_energy_j")
SOURCES = {"gpu_energy_j": "NVML (GPU)", "cpu_energy_j": "RAPL (CPU package)"}
_ZONE = re.compile(r"^intel-rapl:\d+$")


class NvmlEnergy:
    """The GPUs' total-energy counters, summed, as joules since this probe opened."""

    column = "gpu_energy_j"

    def __init__(self, nvml: Any, handles: list):
        self.nvml, self.handles = nvml, handles
        self.start = self._millijoules()  # raises NVMLError where a GPU has no counter

    def _millijoules(self) -> float:
        return float(sum(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles))

    def read(self) -> float | None:
        try:
            return (self._millijoules() - self.start) / 1000.0
        except self.nvml.NVMLError:
            return None


class RaplEnergy:
    """RAPL package (and DRAM) zones, summed, as joules since this probe opened, across counter wrap-arounds."""

    column = "cpu_energy_j"

    def __init__(self, zones: list[tuple[Path, float]]):
        self.zones = zones  # (energy_uj file, max_energy_range_uj)
        self.last = [self._read(path) for path, _ in zones]
        self.total_uj = 0.0

    @staticmethod
    def _read(path: Path) -> float:
        return float(path.read_text().strip())

    def read(self) -> float | None:
        try:
            now = [self._read(path) for path, _ in self.zones]
        except (OSError, ValueError):
            return None
        for (_, wrap), before, after in zip(self.zones, self.last, now):
            self.total_uj += after - before if after >= before else after + wrap - before
        self.last = now
        return self.total_uj / 1e6


def rapl_zones(root: Path = POWERCAP) -> list[tuple[Path, float]]:
    """The package zones and their ``dram`` subzones under ``root`` (psys and core/uncore subzones are left out:
    they overlap the packages)."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if not _ZONE.match(zone.name) or not (zone / "name").is_file():
            continue
        if (zone / "name").read_text().strip().startswith("package"):
            zones.append(zone)
            zones += [sub for sub in sorted(zone.glob(f"{zone.name}:*"))
                      if (sub / "name").is_file() and (sub / "name").read_text().strip() == "dram"]
    return [(z / "energy_uj", float((z / "max_energy_range_uj").read_text().strip())) for z in zones]


def open_rapl(root: Path = POWERCAP) -> tuple[RaplEnergy | None, str | None]:
    """``(probe, None)`` when RAPL's package counters can be read under ``root``, else ``(None, reason)``."""
    if not root.is_dir():
        return None, f"no {root} (no RAPL here)"
    try:
        zones = rapl_zones(root)
        if not zones:
            return None, f"no RAPL package zone under {root}"
        return RaplEnergy(zones), None
    except PermissionError:
        return None, f"RAPL under {root} is not readable (energy_uj is root-only on Linux 5.10 and later)"
    except (OSError, ValueError) as exc:
        return None, f"RAPL under {root} cannot be read ({exc})"


def open_nvml_energy(gpu) -> tuple[NvmlEnergy | None, str | None]:
    """``(probe, None)`` when every GPU of the :class:`~monitors.gpu.GpuProbe` ``gpu`` has an energy counter."""
    if gpu is None:
        return None, "no GPU seen through NVML"
    try:
        return NvmlEnergy(gpu.nvml, gpu.handles), None
    except Exception as exc:  # NVMLError_NotSupported (pre-Volta), a binding without the call
        return None, f"NVML has no energy counter here ({exc or type(exc).__name__})"


def powercap_root() -> Path:
    """:data:`POWERCAP`, or the folder the environment's ``LLMLOAD_POWERCAP`` names."""
    return Path(os.environ.get("LLMLOAD_POWERCAP") or POWERCAP)


def open_energy_probes(gpu, powercap: Path | None = None) -> tuple[list, str | None]:
    """Every energy counter readable here (NVML's, RAPL's) and, when there is none, why (one line)."""
    probes, reasons = [], []
    for probe, reason in (open_nvml_energy(gpu), open_rapl(powercap or powercap_root())):
        if probe is not None:
            probes.append(probe)
        else:
            reasons.append(reason)
    return probes, None if probes else "; ".join(reasons)


def energy_between(frame, start: float, end: float) -> tuple[float | None, str | None]:
    """``(joules, column)`` the preferred energy column of a monitor frame counted from ``start`` to ``end``
    (epoch seconds, interpolated between samples), or ``(None, None)`` where no column was recorded."""
    if frame is None or not len(frame) or end <= start:
        return None, None
    for column in ENERGY_COLUMNS:
        if column not in frame.columns:
            continue
        rows = frame[["timestamp", column]].dropna()
        if len(rows) < 2:
            continue
        t, joules = rows["timestamp"].to_numpy(float), rows[column].to_numpy(float)
        return float(_counter_at(end, t, joules) - _counter_at(start, t, joules)), column
    return None, None


def _counter_at(when: float, t, joules) -> float:
    """The counter at ``when``: interpolated between samples, and beyond the first or last sample carried on at
    the power of the nearest interval (a short cell may start before the monitor's first sample or end after its
    last)."""
    import numpy as np  # the reports' side only: the monitor process stays without numpy

    if when < t[0]:
        return float(joules[0] - (t[0] - when) * (joules[1] - joules[0]) / max(t[1] - t[0], 1e-9))
    if when > t[-1]:
        return float(joules[-1] + (when - t[-1]) * (joules[-1] - joules[-2]) / max(t[-1] - t[-2], 1e-9))
    return float(np.interp(when, t, joules))
