"""Energy counters: NVML's through the stand-in, RAPL's through a powercap folder of the same layout (wrap-around
included), the monitor's columns and its one "not available" line, and the joules between two instants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from monitors.energy import energy_between, open_energy_probes, open_nvml_energy, open_rapl, rapl_zones
from monitors.gpu import open_gpu_probe
from monitors.sampler import read_monitor

REPO = Path(__file__).resolve().parents[2]
FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
MIB = 1024 * 1024


def write_zone(root: Path, name: str, label: str, energy_uj: int, max_uj: int = 262143328850) -> Path:
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone


def fake_powercap(root: Path) -> Path:
    """Two packages with a DRAM subzone each, and zones that overlap them (core, psys, the MMIO copy)."""
    write_zone(root, "intel-rapl:0", "package-0", 1_000_000, max_uj=10_000_000)
    write_zone(root, "intel-rapl:0/intel-rapl:0:0", "core", 500_000)
    write_zone(root, "intel-rapl:0/intel-rapl:0:1", "dram", 200_000)
    write_zone(root, "intel-rapl:1", "package-1", 3_000_000)
    write_zone(root, "intel-rapl:2", "psys", 9_000_000)
    write_zone(root, "intel-rapl-mmio:0", "package-0", 1_000_000)
    return root


def set_energy(zone: Path, energy_uj: int) -> None:
    (zone / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.mark.unit
def test_nvml_energy_sums_every_gpu_from_the_probe_start(fake_nvml):
    fake_nvml.configure({"gpus": [{"total": MIB, "used": 0, "util": 1, "energy_mj": [5000, 6500, 9000]},
                                  {"total": MIB, "used": 0, "util": 1, "energy_mj": [100, 600, 1100]}]})
    gpu, _ = open_gpu_probe(fake_nvml)
    energy, reason = open_nvml_energy(gpu)
    assert reason is None and energy.column == "gpu_energy_j"
    assert energy.read() == pytest.approx(2.0)  # (6500 - 5000 + 600 - 100) mJ
    assert energy.read() == pytest.approx(5.0)
    assert energy.read() == pytest.approx(5.0)  # the counters stood still


@pytest.mark.unit
def test_a_gpu_without_an_energy_counter_is_a_reason(fake_nvml):
    fake_nvml.configure({"gpus": [{"total": MIB, "used": 0, "util": 1}]})  # no energy_mj: NotSupported
    gpu, _ = open_gpu_probe(fake_nvml)
    energy, reason = open_nvml_energy(gpu)
    assert energy is None and "no energy counter" in reason and "Not Supported" in reason
    assert open_nvml_energy(None) == (None, "no GPU seen through NVML")


@pytest.mark.unit
def test_rapl_sums_packages_and_dram_across_a_wrap(tmp_path):
    root = fake_powercap(tmp_path / "powercap")
    names = [path.parent.name for path, _ in rapl_zones(root)]
    assert names == ["intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1"]  # core, psys and the MMIO copy left out
    energy, reason = open_rapl(root)
    assert reason is None and energy.column == "cpu_energy_j"
    set_energy(root / "intel-rapl:0", 9_000_000)
    set_energy(root / "intel-rapl:0/intel-rapl:0:1", 700_000)
    set_energy(root / "intel-rapl:1", 4_000_000)
    assert energy.read() == pytest.approx(8.0 + 0.5 + 1.0)
    set_energy(root / "intel-rapl:0", 2_000_000)  # wrapped at 10 J: 1 J to the top, then 2 J
    assert energy.read() == pytest.approx(9.5 + 3.0)


@pytest.mark.unit
def test_rapl_absent_or_without_packages_is_a_reason(tmp_path):
    assert open_rapl(tmp_path / "none") == (None, f"no {tmp_path / 'none'} (no RAPL here)")
    write_zone(tmp_path / "psys-only", "intel-rapl:0", "psys", 5)
    energy, reason = open_rapl(tmp_path / "psys-only")
    assert energy is None and "no RAPL package zone" in reason


@pytest.mark.unit
def test_rapl_is_not_readable_on_this_machine():
    """Say what this machine has: the development VM exposes no /sys/class/powercap (no RAPL at all)."""
    energy, reason = open_rapl()
    if Path("/sys/class/powercap").is_dir():
        pytest.skip(f"this machine has /sys/class/powercap: {reason or 'RAPL readable'}")
    assert energy is None and reason == "no /sys/class/powercap (no RAPL here)"


@pytest.mark.unit
def test_no_counter_at_all_is_one_reason(tmp_path):
    probes, reason = open_energy_probes(None, tmp_path / "none")
    assert probes == [] and reason == f"no GPU seen through NVML; no {tmp_path / 'none'} (no RAPL here)"


@pytest.mark.unit
def test_energy_between_interpolates_the_cumulative_counter():
    frame = pd.DataFrame({"timestamp": [100.0, 101.0, 102.0, 103.0], "gpu_energy_j": [0.0, 50.0, 150.0, 200.0],
                          "cpu_energy_j": [0.0, 1.0, 2.0, 3.0]})
    assert energy_between(frame, 100.5, 102.5) == (pytest.approx(150.0), "gpu_energy_j")  # 175 - 25
    frame["gpu_energy_j"] = float("nan")
    assert energy_between(frame, 100.5, 102.5) == (pytest.approx(2.0), "cpu_energy_j")
    frame["cpu_energy_j"] = float("nan")
    assert energy_between(frame, 100.5, 102.5) == (None, None)


@pytest.mark.unit
def test_a_cell_beyond_the_samples_is_carried_on_at_the_edge_power():
    """A short cell that starts before the first sample or ends after the last is counted at the power of the
    nearest interval, not cut to the sampled span."""
    frame = pd.DataFrame({"timestamp": [100.0, 101.0, 102.0], "cpu_energy_j": [0.0, 20.0, 50.0]})
    assert energy_between(frame, 99.5, 101.0) == (pytest.approx(30.0), "cpu_energy_j")  # 10 J before at 20 W
    assert energy_between(frame, 101.0, 103.0) == (pytest.approx(60.0), "cpu_energy_j")  # 30 + 30 J after at 30 W


def run_monitor(tmp_path: Path, env: dict) -> tuple[subprocess.CompletedProcess, pd.DataFrame]:
    out = tmp_path / "monitor.csv"
    proc = subprocess.run([sys.executable, "-m", "monitors", "--out", str(out), "--interval", "0.2", "--duration",
                           "1"], cwd=REPO, capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    return proc, read_monitor(out)


@pytest.mark.integration
def test_the_monitor_records_the_nvml_counter(tmp_path):
    config = {"gpus": [{"total": 80 * 1024 * MIB, "used": MIB, "util": 50,
                        "energy_mj": [1000 + 250 * i for i in range(20)]}]}  # 250 mJ more at every read
    proc, frame = run_monitor(tmp_path, {"PYTHONPATH": os.pathsep.join([str(FAKE_NVML_DIR), str(REPO)]),
                                         "FAKE_NVML_CONFIG": json.dumps(config),
                                         "LLMLOAD_POWERCAP": str(tmp_path / "none")})
    assert "energy" not in proc.stderr  # NVML has a counter: no notice
    values = list(frame["gpu_energy_j"])
    assert len(values) >= 5 and values[0] == pytest.approx(0.25)
    assert values == pytest.approx([0.25 * (i + 1) for i in range(len(values))])
    assert frame["cpu_energy_j"].isna().all()


@pytest.mark.integration
def test_the_monitor_records_rapl_and_says_once_when_nothing_counts(tmp_path):
    root = fake_powercap(tmp_path / "powercap")
    _, frame = run_monitor(tmp_path, {"LLMLOAD_POWERCAP": str(root)})
    assert list(frame["cpu_energy_j"].dropna()) == [0.0] * len(frame)  # the files stood still: 0 J
    proc, frame = run_monitor(tmp_path, {"LLMLOAD_POWERCAP": str(tmp_path / "none")})
    assert proc.stderr.count("energy per token not available") == 1, proc.stderr
    assert f"no {tmp_path / 'none'} (no RAPL here)" in proc.stderr
    assert frame["cpu_energy_j"].isna().all() and frame["gpu_energy_j"].isna().all()
