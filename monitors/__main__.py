"""Resource monitor CLI: sample into a CSV until SIGINT/SIGTERM or ``--duration``.

    python -m monitors --out results/run/monitor.csv --server-pid 1234 --interval 0.5 --duration 60
    python -m monitors --out monitor.csv --server-pid 1234 --metrics-url http://localhost:8000/metrics

The client (load generator) tree defaults to this command's parent process.
Column meanings: see :mod:`monitors.sampler`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

import psutil

from llmload.core.cliargs import OneLineParser, positive_float, positive_int
from monitors.energy import open_energy_probes
from monitors.gpu import open_gpu_probe
from monitors.sampler import _READY, Sampler, notify_stderr, record
from monitors.server_metrics import MetricsProbe


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m monitors", description=__doc__.split("\n\n")[0].replace("``", ""))
    parser.add_argument("--out", required=True, help="CSV file to write (overwritten)")
    parser.add_argument("--server-pid", type=positive_int, help="server whose process tree is measured")
    parser.add_argument("--client-pid", type=positive_int,
                        help="load generator whose process tree's CPU is measured (default: the parent process)")
    parser.add_argument("--metrics-url", metavar="URL",
                        help="the server's Prometheus /metrics (vLLM or the basic server), read at each interval "
                             "into the server_running, server_waiting, server_kv_cache_pct, "
                             "server_prefix_cache_hit_pct and server_ttft_mean_ms columns (default: none, empty)")
    parser.add_argument("--interval", type=positive_float, default=0.5,
                        help="seconds between samples (default: %(default)s)")
    parser.add_argument("--duration", type=positive_float, help="stop after this many seconds (default: on signal)")
    # Set by monitors.sampler.start_monitor: print a ready line, stop when that PID ends,
    # and treat PIDs that are already gone as a notice, not an error.
    parser.add_argument("--managed-by", type=positive_int, help=argparse.SUPPRESS)
    # Set by start_monitor after its first monitor in a process: the "no GPU" and "no energy" notices were shown.
    parser.add_argument("--no-gpu-notice", action="store_true", help=argparse.SUPPRESS)
    # Set by start_monitor after its first monitor of this --metrics-url: "no Prometheus metrics" was already said.
    parser.add_argument("--no-missing-metrics-notice", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.managed_by:
        for flag, pid in (("--server-pid", args.server_pid), ("--client-pid", args.client_pid)):
            if pid and not psutil.pid_exists(pid):
                parser.error(f"{flag} {pid}: no such process")
    return args


def _watch(pid: int, stop: threading.Event, period: float = 0.5) -> None:
    """Set ``stop`` once ``pid`` has ended (the monitor must not outlive its owner)."""
    try:
        owner = psutil.Process(pid)
    except psutil.Error:
        stop.set()
        return
    while not stop.wait(period):
        try:
            if not owner.is_running() or owner.status() == psutil.STATUS_ZOMBIE:
                stop.set()
        except psutil.Error:
            stop.set()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())

    gpu, reason = open_gpu_probe()
    if gpu is None and not args.no_gpu_notice:
        notify_stderr(f"no GPU metrics: {reason}; GPU columns are left empty")
    energy, why = open_energy_probes(gpu)
    if why and not args.no_gpu_notice:
        notify_stderr(f"energy per token not available: {why}")
    metrics = MetricsProbe(args.metrics_url, args.interval, notify_stderr,
                           say_missing=not args.no_missing_metrics_notice) if args.metrics_url else None
    sampler = Sampler(server_pid=args.server_pid, client_pid=args.client_pid or os.getppid(),
                      gpu=gpu, exclude_pids={os.getpid()}, server_metrics=metrics, energy=energy)

    def ready() -> None:
        if args.managed_by:
            print(_READY, flush=True)
            # Nothing else goes to the pipe: the owner may have closed it.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            threading.Thread(target=_watch, args=(args.managed_by, stop), daemon=True).start()

    try:
        record(args.out, sampler, interval=args.interval, duration=args.duration, stop=stop, on_ready=ready)
    except OSError as exc:
        print(f"monitor: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        if gpu:
            gpu.close()
        if metrics:
            metrics.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
