"""The sampler on real process trees, start_monitor's separate process, and the CSV reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import monitors.sampler
from monitors.gpu import open_gpu_probe
from monitors.sampler import (BASE_COLUMNS, PEAK_KEYS, Sampler, gpu_columns, peak_usage, read_monitor, record,
                              start_monitor)

REPO = Path(__file__).resolve().parents[2]
GPU_HERE = open_gpu_probe()[0] is not None


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.integration
def test_tree_rss_counts_the_grandchild(memory_tree):
    row = Sampler(server_pid=memory_tree.pid).sample()
    grandchild = Sampler(server_pid=memory_tree.grandchild_pid).sample()
    assert row["server_procs"] == 2 and grandchild["server_procs"] == 1
    assert grandchild["server_rss_mib"] >= 200  # the 200 MiB it holds
    assert 200 < row["server_rss_mib"] < 400
    assert row["server_rss_mib"] - grandchild["server_rss_mib"] > 3  # the child interpreter counts too


@pytest.mark.integration
def test_tree_cpu_counts_a_spinning_grandchild(process_tree):
    tree = process_tree(spin=True)
    sampler = Sampler(server_pid=tree.pid, client_pid=os.getpid())
    first = sampler.sample()
    assert first["server_cpu_pct"] is None and first["client_cpu_pct"] is None  # no baseline yet
    time.sleep(0.6)
    second = sampler.sample()
    assert second["server_cpu_pct"] > 20  # one core busy = 100
    # The client tree is this process and its descendants, less the server tree (also our child).
    others = {p.pid for p in psutil.Process().children(recursive=True)} - {tree.pid, tree.grandchild_pid}
    assert second["client_procs"] == 1 + len(others)
    assert second["client_cpu_pct"] < second["server_cpu_pct"]


@pytest.mark.integration
@pytest.mark.serial
def test_start_monitor_writes_flushed_rows_on_schedule(memory_tree, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(monitors.sampler, "_started_in_this_process", False)  # as in a fresh process
    out = tmp_path / "cell_monitor.csv"
    handle = start_monitor(out, server_pid=memory_tree.pid, interval=0.2)
    assert handle.running and handle.pid != os.getpid()
    spin(1.2)  # the load generator (this process) is busy
    assert len(read_monitor(out)) >= 4  # rows are on disk while it runs
    handle.stop()
    assert not handle.running
    handle.stop()  # idempotent

    df = read_monitor(out)
    assert list(df.columns[:len(BASE_COLUMNS)]) == BASE_COLUMNS
    assert df["timestamp"].is_monotonic_increasing and df["timestamp"].diff().dropna().gt(0).all()
    steps = df["elapsed_s"].diff().dropna()
    assert df["elapsed_s"].iloc[0] == 0 and 0.15 <= steps.median() <= 0.3
    assert abs((df["timestamp"].iloc[-1] - df["timestamp"].iloc[0]) - df["elapsed_s"].iloc[-1]) < 0.1
    assert (df["server_procs"] == 2).all() and (df["server_rss_mib"] >= 200).all()
    # Neither the monitor nor the server tree counts as client; other children of this
    # process (a session-wide server started by another test) do.
    others = {p.pid for p in psutil.Process().children(recursive=True)} - \
        {memory_tree.pid, memory_tree.grandchild_pid}
    assert (df["client_procs"] == 1 + len(others)).all()
    assert (df["host_used_mib"] + df["host_available_mib"] <= df["host_total_mib"] * 1.01).all()

    peaks = peak_usage(df)
    assert set(peaks) == set(PEAK_KEYS)
    assert peaks["peak_server_rss_mib"] == df["server_rss_mib"].max() >= 200
    assert peaks["peak_host_used_mib"] > 0
    assert peaks["mean_client_cpu_pct"] > 30
    if not GPU_HERE:
        assert df[["gpu_count", "gpu_used_mib", "server_gpu_mib"]].isna().all().all()
        assert peaks["peak_gpu_used_mib"] is None and peaks["peak_server_gpu_mib"] is None
        assert capfd.readouterr().err.count("no GPU metrics") == 1


@pytest.mark.integration
def test_server_dying_mid_run_is_recorded(process_tree, tmp_path, capfd):
    tree = process_tree(alloc_mib=20)
    out = tmp_path / "monitor.csv"
    handle = start_monitor(out, server_pid=tree.pid, interval=0.1)
    time.sleep(0.5)
    os.killpg(tree.pid, signal.SIGKILL)
    tree.process.wait()
    time.sleep(0.5)
    assert handle.running  # the monitor outlives the server
    handle.stop()
    df = read_monitor(out)
    assert df["server_procs"].iloc[0] == 2 and df["server_procs"].iloc[-1] == 0
    after = df[df["server_procs"] == 0]
    assert len(after) >= 2 and after["server_rss_mib"].isna().all()
    assert peak_usage(df)["peak_server_rss_mib"] >= 20
    assert capfd.readouterr().err.count(f"server PID {tree.pid} has exited") == 1


@pytest.mark.integration
def test_a_killed_monitor_keeps_its_rows_and_stop_is_safe(tmp_path):
    out = tmp_path / "monitor.csv"
    handle = start_monitor(out, interval=0.1)
    time.sleep(0.5)
    os.kill(handle.pid, signal.SIGKILL)
    handle.process.wait()
    handle.stop()
    handle.stop()
    df = read_monitor(out)
    assert len(df) >= 3 and df[["timestamp", "host_used_mib"]].notna().all().all()
    assert df["server_procs"].isna().all()  # no server given


@pytest.mark.integration
def test_the_monitor_ends_when_its_owner_dies(tmp_path):
    owner = subprocess.run(
        [sys.executable, "-c", "import os, sys; from monitors.sampler import start_monitor; "
         "h = start_monitor(sys.argv[1], interval=0.1); print(h.pid, flush=True); os._exit(0)",
         str(tmp_path / "monitor.csv")], cwd=REPO, capture_output=True, text=True, timeout=30)
    monitor = int(owner.stdout)
    try:
        psutil.Process(monitor).wait(timeout=5)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(monitor) or psutil.Process(monitor).status() == psutil.STATUS_ZOMBIE
    assert len(read_monitor(tmp_path / "monitor.csv")) >= 1


@pytest.mark.integration
def test_gpu_columns_and_peaks_with_the_nvml_stand_in(fake_nvml, two_gpu_config, memory_tree, tmp_path):
    mib = 1024 * 1024
    config = two_gpu_config(memory_tree.pid, memory_tree.grandchild_pid, os.getpid())
    config["gpus"][0]["used"] = [10240 * mib, 30720 * mib, 20480 * mib]  # GPU 0 peaks at the second sample
    fake_nvml.configure(config)
    probe, _ = open_gpu_probe(fake_nvml)
    out = tmp_path / "monitor.csv"
    rows = record(out, Sampler(server_pid=memory_tree.pid, gpu=probe), interval=0.05, duration=0.2)
    df = read_monitor(out)
    assert rows == len(df) >= 3
    assert list(df.columns) == BASE_COLUMNS + gpu_columns(2)
    assert df["gpu0_used_mib"].tolist()[:3] == [10240, 30720, 20480]
    assert (df["gpu_count"] == 2).all() and (df["gpu_total_mib"] == 2 * 81920).all()
    assert (df["gpu1_used_mib"] == 2048).all() and (df["gpu_util_pct"] == 21).all()
    assert (df["gpu0_server_mib"] == 6144).all() and (df["gpu1_server_mib"] == 1536).all()
    assert (df["server_gpu_mib"] == 7680).all()
    peaks = peak_usage(df)
    assert peaks["peak_gpu_used_mib"] == 30720 + 2048
    assert peaks["peak_server_gpu_mib"] == 7680
    assert peaks["peak_server_rss_mib"] >= 200


@pytest.mark.unit
def test_reader_on_empty_and_foreign_files(tmp_path):
    header_only = tmp_path / "header.csv"
    header_only.write_text(",".join(BASE_COLUMNS) + "\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    for path in (header_only, empty):
        df = read_monitor(path)
        assert len(df) == 0 and peak_usage(df) == dict.fromkeys(PEAK_KEYS)
    foreign = tmp_path / "foreign.csv"
    foreign.write_text("Name,Request Count\nAggregated,3\n")
    with pytest.raises(ValueError, match="not a monitor CSV"):
        read_monitor(foreign)


@pytest.mark.unit
def test_bad_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="interval must be > 0"):
        start_monitor(tmp_path / "m.csv", interval=0)


@pytest.mark.integration
@pytest.mark.serial
def test_a_saturated_gevent_client_neither_delays_the_samples_nor_hides(tmp_path):
    """The locustfile case: start_monitor inside a gevent-patched process whose hub is then blocked."""
    out = tmp_path / "monitor.csv"
    script = ("from gevent import monkey; monkey.patch_all()\n"
              "import sys, time, gevent\n"
              "from monitors.sampler import start_monitor\n"
              "handle = start_monitor(sys.argv[1], interval=0.1)\n"
              "def busy():\n"
              "    end = time.monotonic() + 1.0\n"
              "    while time.monotonic() < end:\n"
              "        pass\n"
              "gevent.spawn(busy).join()\n"
              "handle.stop()\n")
    done = subprocess.run([sys.executable, "-c", script, str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    df = read_monitor(out)
    assert len(df) >= 8 and df["elapsed_s"].diff().dropna().median() < 0.15
    assert peak_usage(df)["mean_client_cpu_pct"] > 30  # the busy client shows


@pytest.mark.integration
def test_only_the_first_monitor_of_a_process_gives_the_gpu_notice(tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(monitors.sampler, "_started_in_this_process", False)  # as in a fresh process
    for name in ("a.csv", "b.csv"):
        start_monitor(tmp_path / name, interval=0.1).stop()
    err = capfd.readouterr().err
    assert err.count("no GPU metrics") == (0 if GPU_HERE else 1)
