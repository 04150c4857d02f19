"""The servers of a run: started when a cell needs one, kept up while memory allows, stopped to make room.

With an interleaved order consecutive cells go to different servers. The
runner keeps every server up together when their memory fits the machine
(:meth:`ServerPool.all_fit`: each kind's estimate, :meth:`TargetKind.memory_gib`,
replaced by the peak the monitor measured once it has run, against the memory
available less :data:`RESERVE_GIB` for the load generator); otherwise it stops
the server used least recently before starting another. A server that fails
to start, or dies, is not started again: its cells are skipped.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from llmload.core.services import ServiceError
from llmload.runner.interrupts import StopSignal
from llmload.runner.progress import Progress
from llmload.targets import RunningTarget, Target, TargetKind, TargetSettings, start_target

#: Memory left for the load generator, the monitor and the system (GiB).
RESERVE_GIB = 2.0
#: A measured peak is scaled by this before it stands for the server's need.
MEASURED_MARGIN = 1.2
GIB = 2.0 ** 30


def available_gib() -> float:
    return psutil.virtual_memory().available / GIB


class ServerPool:
    """Starts, keeps and stops the run's servers (see the module docstring)."""

    def __init__(self, targets: list[Target], kinds: dict[str, TargetKind], settings: TargetSettings, run_dir: Path,
                 stop: StopSignal, progress: Progress, max_up: int = 0):
        self.targets = {t.name: t for t in targets}
        self.kinds = kinds
        self.settings = settings
        self.run_dir = Path(run_dir)
        self.stop = stop
        self.progress = progress
        self.max_up = max_up  # 0: as many as memory allows
        self.up: dict[str, RunningTarget] = {}  # least recently used first
        self.gone: dict[str, str] = {}  # server -> why its cells are skipped
        self.measured: dict[str, float] = {}  # server -> peak GiB seen by the monitor
        self.starts = 0

    def started_here(self, name: str) -> bool:
        return not (self.targets[name].url or self.kinds[name].external)

    def need_gib(self, name: str) -> float:
        """What ``name`` is expected to take: its measured peak (with a margin), else its kind's estimate."""
        if not self.started_here(name):
            return 0.0
        if name in self.measured:
            return self.measured[name] * MEASURED_MARGIN
        return self.kinds[name].memory_gib(self.settings)

    def all_fit(self) -> tuple[bool, float, float]:
        """(whether every server can be up at once, their estimated GiB, the GiB available less the reserve)."""
        started = [n for n in self.targets if self.started_here(n)]
        need = sum(self.need_gib(n) for n in started)
        room = available_gib() - RESERVE_GIB
        return (need <= room and (not self.max_up or len(started) <= self.max_up)), need, room

    def get(self, name: str) -> RunningTarget | None:
        """``name`` up and healthy (started if needed), or None when it failed to start or died (see ``gone``)."""
        if name in self.gone:
            return None
        running = self.up.pop(name, None)
        if running is not None:
            if running.alive():
                self.up[name] = running  # most recently used
                return running
            self.gone[name] = "server died earlier in the run"
            return None
        self._make_room(name)
        return self._start(name)

    def note_peak(self, name: str, peak_rss_mib: float | None) -> None:
        if peak_rss_mib:
            self.measured[name] = max(self.measured.get(name, 0.0), peak_rss_mib / 1024.0)

    def stop_server(self, name: str) -> None:
        with self.stop.deferred():
            running = self.up.pop(name, None)
            if running is not None:
                running.stop()

    def stop_all(self) -> None:
        for name in list(self.up):
            self.stop_server(name)

    def _make_room(self, name: str) -> None:
        if not self.started_here(name):
            return
        while self.up:
            started = [n for n in self.up if self.started_here(n)]
            over_count = self.max_up and len(started) >= self.max_up
            if not started or (not over_count and self.need_gib(name) <= available_gib() - RESERVE_GIB):
                return
            print(f"== {started[0]}: stopped to make room for {name}", flush=True)
            self.stop_server(started[0])

    def _start(self, name: str) -> RunningTarget | None:
        target, kind = self.targets[name], self.kinds[name]
        print(f"== {name}: {'using ' + target.url if target.url else 'starting ' + kind.name} ...", flush=True)
        began = time.monotonic()
        try:
            running = start_target(target, kind, self.settings, self.run_dir / name / "server.log")
        except ServiceError as exc:
            first_line = str(exc).splitlines()[0]
            print(f"   {name} failed to start: {first_line}", flush=True)
            self.gone[name] = f"server failed to start: {first_line}"
            return None
        self.up[name] = running
        self.starts += 1
        self.progress.server_started(running.ready_s or time.monotonic() - began)
        return running
