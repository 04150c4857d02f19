"""Resource sampler: host memory, server and client process trees, GPUs, one CSV row per sample.

    handle = start_monitor("results/run/cell_monitor.csv", server_pid=server.pid)
    ...                                   # run the load
    handle.stop()                         # flushes and closes the CSV; idempotent

:func:`start_monitor` runs the sampling loop in a separate, fresh Python
process (``python -m monitors``), so a saturated gevent load generator cannot
delay the samples. Each row is flushed as soon as it is written: a crashed run
keeps its data.

CSV columns (wide format; empty cell = not measured)::

    timestamp             epoch seconds of the sample
    elapsed_s             seconds since the first sample (monotonic clock)
    host_total_mib, host_used_mib, host_available_mib   system memory (psutil.virtual_memory)
    host_cpu_pct          whole machine, 100 = every core busy
    server_procs          processes in the server tree (the PID and all its descendants; 0 once it died)
    server_rss_mib        summed RSS of the server tree (shared pages count once per process)
    server_cpu_pct        CPU of the server tree since the previous sample, 100 = one core busy
    client_procs, client_cpu_pct   the same for the load generator's tree (the client PID and its
                          descendants, less this monitor and the server tree)
    gpu_count             GPUs seen by NVML (empty: no NVML)
    gpu_used_mib, gpu_total_mib    summed over GPUs
    gpu_util_pct          mean utilisation over GPUs
    server_gpu_mib        the server tree's memory over all GPUs (NVML per-process lists)
    gpu_energy_j, cpu_energy_j   joules since the first sample: NVML's GPU energy counter, RAPL's CPU
                          package counters (empty where not readable; :mod:`monitors.energy`)
    server_running, server_waiting   requests running / waiting, from the server's /metrics (metrics_url)
    server_kv_cache_pct   the server's KV-cache use, 0-100
    server_prefix_cache_hit_pct   prefix-cache hits over queries since the previous scrape (vLLM)
    server_ttft_mean_ms   mean time to first token of the requests whose first token came since the
                          previous scrape (the server's TTFT histogram)
    gpu{i}_used_mib, gpu{i}_total_mib, gpu{i}_util_pct, gpu{i}_server_mib   per GPU i

Without a GPU or NVML the ``gpu_*``/``server_gpu_mib`` columns are present and
empty, the per-GPU columns absent, and one notice goes to stderr. The server
metric columns are empty without ``metrics_url``, where the server has no such
metric, and while its ``/metrics`` fails (one notice; :mod:`monitors.server_metrics`).

:func:`read_monitor` and :func:`peak_usage` are the one place the reports get
resource figures from.
"""

from __future__ import annotations

import csv
import math
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable, Iterable

import psutil

from monitors.energy import ENERGY_COLUMNS
from monitors.gpu import MIB, GpuProbe, GpuReading
from monitors.server_metrics import METRIC_COLUMNS, MetricsProbe

BASE_COLUMNS = [
    "timestamp", "elapsed_s",
    "host_total_mib", "host_used_mib", "host_available_mib", "host_cpu_pct",
    "server_procs", "server_rss_mib", "server_cpu_pct",
    "client_procs", "client_cpu_pct",
    "gpu_count", "gpu_used_mib", "gpu_total_mib", "gpu_util_pct", "server_gpu_mib",
    *METRIC_COLUMNS, *ENERGY_COLUMNS,
]
PER_GPU_FIELDS = ("used_mib", "total_mib", "util_pct", "server_mib")
#: What :func:`peak_usage` returns (the summary table's resource columns).
PEAK_KEYS = ("peak_gpu_used_mib", "peak_server_gpu_mib", "peak_server_rss_mib", "peak_host_used_mib",
             "mean_client_cpu_pct", "peak_server_running", "peak_server_waiting", "peak_server_kv_cache_pct",
             "mean_server_prefix_cache_hit_pct")

_REPO_ROOT = Path(__file__).resolve().parent.parent
_READY = "monitor-ready"


class MonitorError(RuntimeError):
    """The monitor process could not start (one line)."""


def gpu_columns(count: int) -> list[str]:
    """The per-GPU column names for ``count`` GPUs."""
    return [f"gpu{i}_{name}" for i in range(count) for name in PER_GPU_FIELDS]


def notify_stderr(message: str) -> None:
    """Default notice sink: one line on stderr."""
    print(f"monitor: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- process trees

def _children_map() -> dict[int, list[int]]:
    """Parent PID -> child PIDs, from one scan of the process table."""
    children: dict[int, list[int]] = defaultdict(list)
    for proc in psutil.process_iter(["ppid"]):
        ppid = proc.info.get("ppid")
        if ppid is not None and ppid != proc.pid:
            children[ppid].append(proc.pid)
    return children


@dataclass
class TreeReading:
    """One process tree at one instant."""

    procs: int
    rss_mib: float | None
    cpu_pct: float | None
    pids: set[int] = field(default_factory=set)


class ProcessTree:
    """A root process and its descendants, walked afresh at every sample.

    CPU percent is the tree's CPU time (user + system) since the previous
    sample over the wall time between them, 100 = one core busy: a process born
    in between counts all its CPU time, one that ended in between is lost.
    """

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self.root: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self.root = None
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_seen: dict[tuple[int, float], float] = {}
        self._last_sample: tuple[float, float] | None = None  # (monotonic, epoch)

    @property
    def alive(self) -> bool:
        """The root still runs (a zombie or a reused PID counts as gone)."""
        try:
            return self.root is not None and self.root.is_running() and self.root.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _member_pids(self, children: dict[int, list[int]], exclude: set[int]) -> list[int]:
        pids, stack = [], [self.pid]
        while stack:
            pid = stack.pop()
            if pid in exclude:
                continue
            pids.append(pid)
            stack.extend(children.get(pid, ()))
        return pids

    def _process(self, pid: int) -> psutil.Process:
        proc = self._procs.get(pid)
        if proc is None or not proc.is_running():  # is_running() also catches PID reuse
            proc = self._procs[pid] = psutil.Process(pid)
        return proc

    def read(self, children: dict[int, list[int]], exclude: Iterable[int] = ()) -> TreeReading:
        """Process count, summed RSS and CPU percent of the tree now (procs 0 once the root died)."""
        if not self.alive:
            return TreeReading(procs=0, rss_mib=None, cpu_pct=None)
        mono, epoch = time.monotonic(), time.time()
        rss, cpu_now, pids = 0, {}, set()
        for pid in self._member_pids(children, set(exclude)):
            try:
                proc = self._process(pid)
                with proc.oneshot():
                    mem = proc.memory_info().rss
                    times = proc.cpu_times()
                    key = (pid, proc.create_time())
            except psutil.Error:  # NoSuchProcess, ZombieProcess, AccessDenied: not counted
                self._procs.pop(pid, None)
                continue
            rss += mem
            cpu_now[key] = times.user + times.system
            pids.add(pid)
        cpu_pct = None
        if pids and self._last_sample is not None and mono > self._last_sample[0]:
            last_mono, last_epoch = self._last_sample
            busy = 0.0
            for key, seconds in cpu_now.items():
                if key in self._cpu_seen:
                    busy += max(0.0, seconds - self._cpu_seen[key])
                elif key[1] >= last_epoch - 0.05:  # born since the previous sample
                    busy += seconds
            cpu_pct = 100.0 * busy / (mono - last_mono)
        self._cpu_seen, self._last_sample = cpu_now, (mono, epoch)
        for stale in set(self._procs) - pids:
            del self._procs[stale]
        return TreeReading(procs=len(pids), rss_mib=rss / MIB if pids else None, cpu_pct=cpu_pct, pids=pids)


# ---------------------------------------------------------------- one sample

class Sampler:
    """Builds one CSV row per call to :meth:`sample`.

    ``gpu`` is a :class:`monitors.gpu.GpuProbe` or None (no NVML: GPU columns
    empty); ``server_metrics`` a :class:`monitors.server_metrics.MetricsProbe`
    or None; ``energy`` the counters of :func:`monitors.energy.open_energy_probes`.
    ``exclude_pids`` (the monitor itself) are left out of both trees;
    the server tree is always left out of the client's.
    """

    def __init__(self, server_pid: int | None = None, client_pid: int | None = None,
                 gpu: GpuProbe | None = None, exclude_pids: Iterable[int] = (),
                 notify: Callable[[str], None] = notify_stderr, server_metrics: MetricsProbe | None = None,
                 energy: Iterable = ()):
        self.energy = list(energy)
        self.server = ProcessTree(server_pid) if server_pid else None
        self.client = ProcessTree(client_pid) if client_pid else None
        self.gpu = gpu
        self.server_metrics = server_metrics
        self.exclude_pids = set(exclude_pids)
        self.notify = notify
        self.columns = BASE_COLUMNS + gpu_columns(gpu.count if gpu else 0)
        self._server_gone_noticed = False
        self._sampled = False
        self._start: float | None = None
        psutil.cpu_percent(interval=None)  # prime the system-wide counter
        if self.server and not self.server.alive:
            self._server_gone(at_start=True)

    def _server_gone(self, at_start: bool = False) -> None:
        if not self._server_gone_noticed:
            self._server_gone_noticed = True
            when = "is not running" if at_start else "has exited"
            self.notify(f"server PID {self.server.pid} {when}; server columns are empty from here on")

    def sample(self) -> dict[str, float | int | None]:
        """One row: every column of :attr:`columns` (None = not measured)."""
        mono = time.monotonic()
        if self._start is None:
            self._start = mono
        row: dict[str, float | int | None] = dict.fromkeys(self.columns)
        row["timestamp"] = time.time()
        row["elapsed_s"] = mono - self._start
        vm = psutil.virtual_memory()
        row.update(host_total_mib=vm.total / MIB, host_used_mib=vm.used / MIB,
                   host_available_mib=vm.available / MIB)
        host_cpu = psutil.cpu_percent(interval=None)
        row["host_cpu_pct"] = host_cpu if self._sampled else None  # the first figure has no baseline
        self._sampled = True

        children = _children_map()
        server_pids: set[int] | None = None
        if self.server:
            tree = self.server.read(children, exclude=self.exclude_pids)
            row.update(server_procs=tree.procs, server_rss_mib=tree.rss_mib, server_cpu_pct=tree.cpu_pct)
            server_pids = tree.pids or None  # a dead server has no GPU memory to look for
            if tree.procs == 0:
                self._server_gone()
        if self.client:
            exclude = self.exclude_pids | (server_pids or set()) | ({self.server.pid} if self.server else set())
            tree = self.client.read(children, exclude=exclude)
            row.update(client_procs=tree.procs, client_cpu_pct=tree.cpu_pct)
        if self.gpu:
            row.update(self._gpu_columns(self.gpu.read(server_pids)))
            for notice in self.gpu.notices:
                self.notify(notice)
            self.gpu.notices.clear()
        if self.server_metrics:
            row.update(self.server_metrics.read())
        for counter in self.energy:
            row[counter.column] = counter.read()
        return row

    @staticmethod
    def _gpu_columns(readings: list[GpuReading]) -> dict[str, float | int | None]:
        def total(values: list[float | None]) -> float | None:
            return None if not values or None in values else sum(values)

        cols: dict[str, float | int | None] = {"gpu_count": len(readings)}
        for r in readings:
            for name in PER_GPU_FIELDS:
                cols[f"gpu{r.index}_{name}"] = getattr(r, name)
        cols["gpu_used_mib"] = total([r.used_mib for r in readings])
        cols["gpu_total_mib"] = total([r.total_mib for r in readings])
        utils = [r.util_pct for r in readings if r.util_pct is not None]
        cols["gpu_util_pct"] = sum(utils) / len(utils) if utils else None
        cols["server_gpu_mib"] = total([r.server_mib for r in readings])
        return cols


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if math.isfinite(value) else ""
    return str(value)


def record(out_path: str | os.PathLike, sampler: Sampler, interval: float = 0.5,
           duration: float | None = None, stop: threading.Event | None = None,
           on_ready: Callable[[], None] | None = None) -> int:
    """Sample every ``interval`` s into ``out_path`` until ``stop`` is set or ``duration`` passed.

    Samples keep to a fixed schedule (ticks missed by a slow sample are
    skipped, not bunched). Every row is flushed. Returns the number of rows.
    """
    stop = stop or threading.Event()
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    with out_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(sampler.columns)
        handle.flush()
        if on_ready:
            on_ready()
        start = time.monotonic()
        tick = 0
        while not stop.is_set():
            row = sampler.sample()
            writer.writerow([_cell(row[c]) for c in sampler.columns])
            handle.flush()
            rows += 1
            now = time.monotonic()
            tick = max(tick + 1, math.ceil((now - start) / interval))
            if duration is not None and tick * interval > duration + 1e-9:
                break
            stop.wait(max(0.0, start + tick * interval - time.monotonic()))
    return rows


# ---------------------------------------------------------------- the separate process

def _stop_process(process: subprocess.Popen, timeout: float) -> None:
    if process.poll() is None:
        try:
            process.terminate()
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        except ProcessLookupError:
            pass
    if process.stdout:
        process.stdout.close()


class MonitorHandle:
    """A running monitor process: :meth:`stop` it (idempotent) when the run ends."""

    def __init__(self, process: subprocess.Popen, out_path: Path):
        self.process = process
        self.out_path = out_path
        self._finalizer = weakref.finalize(self, _stop_process, process, 10.0)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the monitor to finish its row, flush and close the CSV; wait for it (kill after ``timeout``)."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop_process(self.process, timeout)

    def __enter__(self) -> MonitorHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_started_in_this_process = False
#: The metrics URLs a monitor of this process has read already (a runner starts one monitor per cell).
_metrics_urls_seen: set[str] = set()


def monitor_command(out_csv_path: str | os.PathLike, server_pid: int | None = None, interval: float = 0.5,
                    client_pid: int | None = None, gpu_notice: bool = True,
                    metrics_url: str | None = None, missing_metrics_notice: bool = True) -> list[str]:
    """The ``python -m monitors`` command :func:`start_monitor` runs."""
    cmd = [sys.executable, "-m", "monitors", "--out", str(out_csv_path), "--interval", str(interval),
           "--client-pid", str(client_pid or os.getpid()), "--managed-by", str(os.getpid())]
    if server_pid:
        cmd += ["--server-pid", str(server_pid)]
    if metrics_url:
        cmd += ["--metrics-url", metrics_url]
    if not gpu_notice:
        cmd.append("--no-gpu-notice")
    if metrics_url and not missing_metrics_notice:
        cmd.append("--no-missing-metrics-notice")
    return cmd


def start_monitor(out_csv_path: str | os.PathLike, server_pid: int | None = None, interval: float = 0.5,
                  client_pid: int | None = None, ready_timeout: float = 30.0,
                  metrics_url: str | None = None) -> MonitorHandle:
    """Start sampling into ``out_csv_path`` in a separate process; returns once the CSV header is written.

    ``server_pid``: the server whose process tree (PID and descendants) is
    measured; ``client_pid``: the load generator (default: this process, less
    the monitor and the server tree); ``metrics_url``: the server's Prometheus
    ``/metrics``, read into the ``server_*`` metric columns at each interval
    (vLLM's and the basic server's names). The monitor also ends by itself if this
    process dies. Only the first monitor a process starts shows the "no GPU
    metrics" notice (a runner starts one per matrix cell), and only the first
    per ``metrics_url`` the "no Prometheus metrics" one.
    """
    global _started_in_this_process
    if interval <= 0:
        raise ValueError(f"interval must be > 0, got {interval}")
    out_path = Path(out_csv_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p)
    command = monitor_command(out_path, server_pid, interval, client_pid, gpu_notice=not _started_in_this_process,
                              metrics_url=metrics_url, missing_metrics_notice=metrics_url not in _metrics_urls_seen)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    handle = MonitorHandle(process, out_path)
    ready, _, _ = select.select([process.stdout], [], [], ready_timeout)
    line = process.stdout.readline().decode(errors="replace").strip() if ready else ""
    if line != _READY:
        handle.stop(timeout=2.0)
        why = f"exited with code {process.returncode}" if ready else f"not ready within {ready_timeout:.0f}s"
        raise MonitorError(f"resource monitor for {out_path} {why} (its message is above)")
    _started_in_this_process = True
    if metrics_url:
        _metrics_urls_seen.add(metrics_url)
    return handle


# ---------------------------------------------------------------- reading

def read_monitor(path: str | os.PathLike):
    """The monitor CSV as a pandas DataFrame (empty cells are NaN; an empty file gives no rows)."""
    import pandas as pd

    try:
        frame = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame(columns=BASE_COLUMNS, dtype=float)
    missing = [c for c in ("timestamp", "elapsed_s", "host_used_mib") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} is not a monitor CSV (no column {', '.join(missing)})")
    for col in set(BASE_COLUMNS) - set(frame.columns):
        frame[col] = float("nan")
    return frame


def peak_usage(frame) -> dict[str, float | None]:
    """Resource figures of one run (:data:`PEAK_KEYS`): peaks over the samples and a few means.

    ``peak_gpu_used_mib``: all GPUs' used memory, summed per sample;
    ``peak_server_gpu_mib``: the server tree's GPU memory; ``peak_server_rss_mib``:
    the server tree's RSS; ``peak_host_used_mib``: system memory used;
    ``mean_client_cpu_pct``: load generator CPU (100 = one core);
    ``peak_server_running``, ``peak_server_waiting``, ``peak_server_kv_cache_pct``:
    from the server's metrics; ``mean_server_prefix_cache_hit_pct``: the mean of
    the per-interval hit rates. None where not measured.
    """
    def stat(column: str, how: str) -> float | None:
        if column not in frame.columns:
            return None
        values = frame[column].dropna()
        if values.empty:
            return None
        return float(values.max() if how == "max" else values.mean())

    return {
        "peak_gpu_used_mib": stat("gpu_used_mib", "max"),
        "peak_server_gpu_mib": stat("server_gpu_mib", "max"),
        "peak_server_rss_mib": stat("server_rss_mib", "max"),
        "peak_host_used_mib": stat("host_used_mib", "max"),
        "mean_client_cpu_pct": stat("client_cpu_pct", "mean"),
        "peak_server_running": stat("server_running", "max"),
        "peak_server_waiting": stat("server_waiting", "max"),
        "peak_server_kv_cache_pct": stat("server_kv_cache_pct", "max"),
        "mean_server_prefix_cache_hit_pct": stat("server_prefix_cache_hit_pct", "mean"),
    }
