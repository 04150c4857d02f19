"""``python -m monitors``: --duration, signals, bad input, no NVML, and the NVML stand-in on PYTHONPATH."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitors.gpu import open_gpu_probe
from monitors.sampler import BASE_COLUMNS, gpu_columns, peak_usage, read_monitor

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FAKE_NVML_DIR = Path(__file__).resolve().parent / "fake_nvml"
GPU_HERE = open_gpu_probe()[0] is not None


def monitor_cli(*args: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitors", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.mark.serial
def test_duration_run(memory_tree, tmp_path):
    out = tmp_path / "monitor.csv"
    done = monitor_cli("--out", str(out), "--server-pid", str(memory_tree.pid), "--interval", "0.25",
                       "--duration", "1")
    assert done.returncode == 0, done.stderr
    df = read_monitor(out)
    assert 4 <= len(df) <= 5 and df["elapsed_s"].max() <= 1.1  # samples at 0, 0.25, ... 1.0
    assert (df["server_procs"] == 2).all() and df["server_rss_mib"].min() >= 200
    assert df["client_procs"].notna().all()  # the default client: the CLI's parent (this test)
    if not GPU_HERE:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 2 and lines[0].startswith("monitor: no GPU metrics: NVML")
        assert lines[1].startswith("monitor: energy per token not available: no GPU seen through NVML")
        assert list(df.columns) == BASE_COLUMNS
        assert df[["gpu_count", "gpu_used_mib", "gpu_total_mib", "gpu_util_pct", "server_gpu_mib"]].isna().all().all()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_ends_the_run_cleanly(tmp_path, signum):
    out = tmp_path / "monitor.csv"
    proc = subprocess.Popen([sys.executable, "-m", "monitors", "--out", str(out), "--interval", "0.1"],
                            cwd=REPO, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 3):
        time.sleep(0.05)
    proc.send_signal(signum)
    assert proc.wait(timeout=5) == 0
    text = out.read_text()
    assert text.endswith("\n") and len(read_monitor(out)) >= 2


@pytest.mark.parametrize("args, message", [
    (["--interval", "0"], "argument --interval: '0' is not a number > 0"),
    (["--duration", "soon"], "argument --duration: 'soon' is not a number > 0"),
    (["--server-pid", "-3"], "argument --server-pid: '-3' is not an integer >= 1"),
    (["--server-pid", str(int(Path("/proc/sys/kernel/pid_max").read_text()) + 1)], "no such process"),
])
def test_bad_input_is_one_line(tmp_path, args, message):
    done = monitor_cli("--out", str(tmp_path / "m.csv"), *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error:")
    assert message in done.stderr
    assert not (tmp_path / "m.csv").exists()


def test_gpu_columns_through_the_cli_with_the_nvml_stand_in(memory_tree, two_gpu_config, tmp_path):
    config = two_gpu_config(memory_tree.pid, memory_tree.grandchild_pid, os.getpid())
    out = tmp_path / "monitor.csv"
    done = monitor_cli("--out", str(out), "--server-pid", str(memory_tree.pid), "--interval", "0.1",
                       "--duration", "0.3",
                       env={"PYTHONPATH": os.pathsep.join([str(FAKE_NVML_DIR), str(REPO)]),
                            "FAKE_NVML_CONFIG": json.dumps(config)})
    assert done.returncode == 0 and done.stderr == ""  # NVML "works": no notice
    df = read_monitor(out)
    assert list(df.columns) == BASE_COLUMNS + gpu_columns(2)
    assert (df["gpu0_used_mib"] == 10240).all() and (df["gpu0_total_mib"] == 81920).all()
    assert (df["gpu0_util_pct"] == 37).all() and (df["gpu1_util_pct"] == 5).all()
    # The server (child) on GPU 0 and its grandchild on GPU 1; the other process is not counted.
    assert (df["gpu0_server_mib"] == 6144).all() and (df["gpu1_server_mib"] == 1536).all()
    assert peak_usage(df)["peak_server_gpu_mib"] == 7680
    assert peak_usage(df)["peak_gpu_used_mib"] == 12288
