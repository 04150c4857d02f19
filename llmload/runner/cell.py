"""One cell of the matrix: Locust headless against a running server, the resource monitor beside it.

:class:`CellRunner` builds the Locust command of a :class:`~llmload.core.runfiles.Cell`
(closed loop: ``-u`` users; open loop: ``--rate`` with ``-u`` the pool of
requests in flight), records the cell as ``running``, runs Locust in a session
of its own (a signal to the runner's process group never reaches it), and
records the outcome from the raw log: ``ok``, ``failed``, ``error-rate`` (Locust
stopped it early: more requests failed than ``--max-error-rate`` allows; its
figures are kept) or, when the run was asked to stop, ``interrupted`` with
whatever requests had finished. On a stop
request Locust gets SIGTERM, which makes it stop its users, write its raw log
and CSVs and exit; it is killed only if it has not done so in
:data:`STOP_GRACE_S` seconds, or at a second signal.

While a cell runs, the next cell's Locust starts beside it
(:mod:`llmload.loadgen.spare`: Locust and the load generator imported, about
0.6 s of a cell's start) and waits for its command line; the first cell's is
started by :meth:`CellRunner.start_spare` (while the servers start). A cell
whose spare has died runs a new Locust, and :meth:`CellRunner.close` ends the
last spare.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmload.core.cliargs import to_argv
from llmload.core.metrics import SLO, RequestResult, RunSummary, summarize
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.points import TRACE_PHASE
from llmload.core.runfiles import ERROR_RATE, Cell, CellFiles, append_cell
from llmload.loadgen.options import ERROR_RATE_EXIT_CODE, LoadSettings
from llmload.runner.interrupts import StopSignal
from llmload.runner.options import LOCUST_STOP_TIMEOUT_S
from llmload.tasks import get_task
from llmload.targets import RunningTarget
from monitors.sampler import MonitorError, start_monitor

#: Seconds Locust has, once asked to stop, to finish its users and write its files before it is killed.
STOP_GRACE_S = LOCUST_STOP_TIMEOUT_S + 20
#: Seconds beyond ``--cell-timeout`` (Locust's own ``-t``) before a cell that has not ended is stopped.
TIMEOUT_MARGIN_S = 60
POLL_S = 0.1
#: How a cell's Locust is started: ``LOCUST + its arguments``; a spare is given the arguments alone.
LOCUST = [sys.executable, "-m", "locust"]
SPARE = [sys.executable, "-m", "llmload.loadgen.spare"]
#: Seconds a spare has to exit once its input is closed, before it is killed.
SPARE_EXIT_S = 10.0


@dataclass(frozen=True)
class LoadOptions:
    """What every cell of a run asks for (from the runner's settings: the defaults live in :mod:`.options`)."""

    api: str
    requests: int
    max_tokens: int  # 0: each prompt's own budget
    warmup: int
    arrival: str
    burstiness: float | None
    seed: int
    slo: SLO | None
    cell_timeout: float
    monitor_interval: float = 0.5
    cancel_rate: float = 0.0  # --cancel-rate, with cancel_after (--cancel-after)
    cancel_after: str = ""
    retry: int = 0  # --retry, with retry_max_wait (--retry-max-wait)
    retry_max_wait: float = LoadSettings.retry_max_wait
    max_error_rate: float | None = None  # --max-error-rate
    trace: tuple[tuple[str, Any], ...] = ()  # the load generator's options of a trace cell: (field, value) pairs

    def requests_for(self, cell: Cell) -> int:
        """Requests a cell sends: its own count (a capacity step's later look), else ``--requests``, and at least
        one per user in a closed loop."""
        requests = cell.requests or self.requests
        return requests if cell.rate is not None else max(requests, cell.concurrency)


@dataclass
class CellResult:
    """What one cell measured: its raw results and their summary (None when nothing was measured)."""

    results: list[RequestResult]
    summary: RunSummary | None


class CellRunner:
    """Runs cells of one run folder with one set of :class:`LoadOptions`."""

    def __init__(self, run_dir: Path, options: LoadOptions, datasets: dict[str, Path], stop: StopSignal | None = None):
        self.run_dir = Path(run_dir)
        self.options = options
        self.datasets = datasets
        self.stop = stop or StopSignal()
        self._spare: subprocess.Popen | None = None

    def given(self, cell: Cell) -> dict[str, Any]:
        """The load generator's options ``cell`` gives (:class:`LoadSettings` field: value), in the order its
        command line says them; whatever a cell leaves out is the load generator's default."""
        o = self.options
        given: dict[str, Any] = {"mode": cell.mode, "api": o.api, "temperature": 0.0}
        if cell.phase == TRACE_PHASE:  # the trace gives the requests, their times, prompts and lengths
            given.update(o.trace)
        else:
            given.update(requests=o.requests_for(cell), dataset=str(self.datasets[cell.task]))
            if o.max_tokens:
                given.update(max_tokens=o.max_tokens, ignore_eos=True)
        if cell.rate is not None:
            given.update(rate=cell.rate, arrival=o.arrival, seed=o.seed)
            if o.burstiness is not None:
                given["burstiness"] = o.burstiness
        if o.warmup:
            given["warmup"] = o.warmup
        if o.slo is not None:
            given["slo"] = o.slo  # the load generator judges each request (slo_ok)
        if o.cancel_rate:
            given.update(cancel_rate=o.cancel_rate, cancel_after=o.cancel_after, seed=o.seed)
        if o.retry:
            given.update(retry=o.retry, retry_max_wait=o.retry_max_wait)
        if o.max_error_rate is not None:
            given["max_error_rate"] = o.max_error_rate
        return given

    def command(self, cell: Cell, base_url: str) -> list[str]:
        """The Locust command line of ``cell`` against ``base_url``: Locust's own options, then the load
        generator's, said by their declarations (:func:`~llmload.core.cliargs.to_argv`)."""
        users = cell.concurrency
        given = self.given(cell)
        settings = LoadSettings(**given)
        return [*LOCUST, "-f", str(get_task(cell.task).locustfile), "--headless",
                "-u", str(users), "-r", str(users), "-H", base_url, "--csv", str(self.run_dir / cell.prefix),
                "--only-summary", "--loglevel", "WARNING", "-t", f"{int(self.options.cell_timeout)}s",
                "--stop-timeout", str(LOCUST_STOP_TIMEOUT_S), *to_argv(settings, list(given))]

    def run(self, cell: Cell, target: RunningTarget, announce: str = "", last: bool = False) -> CellResult:
        """Run ``cell`` against ``target`` and record it (``running``, then its outcome) in ``cells.jsonl``.

        ``announce`` is printed (without a newline) once the monitor is up, after any notice of its own;
        ``last``: no cell follows, so no spare Locust is started beside this one.
        """
        with self.stop.deferred():
            files = cell.files(self.run_dir)
            files.prefix.parent.mkdir(parents=True, exist_ok=True)
            cell.status, cell.error, cell.exit_code = "running", "", None
            append_cell(self.run_dir, cell)
            started = time.monotonic()
            try:
                monitor = start_monitor(files.monitor, server_pid=target.pid, interval=self.options.monitor_interval,
                                        metrics_url=target.metrics_url)
            except (MonitorError, OSError) as exc:
                cell.status, cell.error = "failed", f"resource monitor did not start: {exc}"
                append_cell(self.run_dir, cell)
                print(announce, end="", flush=True)
                return CellResult([], None)
            if announce:
                print(announce, end="", flush=True)
            try:
                error = self._locust(cell, target.base_url, files.locust_log, spare=not last)
            finally:
                monitor.stop()
            cell.wall_s = time.monotonic() - started
            result = self._outcome(cell, files, error)
            append_cell(self.run_dir, cell)
        return result

    def _locust(self, cell: Cell, base_url: str, log_path: Path, spare: bool) -> str:
        """Run Locust to its end (or stop it); '' or why the cell did not end by itself."""
        limit = self.options.cell_timeout + TIMEOUT_MARGIN_S
        proc = self._start_locust(self.command(cell, base_url), log_path)
        if spare and not self.stop.requested:
            self.start_spare()
        started = time.monotonic()
        asked_at: float | None = None
        killed = False
        error = ""
        seen = 0
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if asked_at is None and (self.stop.requested or now - started > limit):
                    if not self.stop.requested:
                        error = f"Locust did not finish within {limit:.0f}s"
                    _signal(proc, signal.SIGTERM, group=False)
                    asked_at, seen = now, self.stop.count
                elif asked_at is not None and not killed and (now - asked_at > STOP_GRACE_S
                                                              or self.stop.count > max(seen, 1)):
                    _signal(proc, signal.SIGKILL, group=True)
                    killed = True
                    error = error or f"Locust was killed (it had not stopped {now - asked_at:.0f}s after SIGTERM)"
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:  # an exception on the way out: never leave Locust behind
                _signal(proc, signal.SIGKILL, group=True)
                proc.wait()
        _signal(proc, signal.SIGKILL, group=True)  # anything Locust left in its session
        cell.exit_code = proc.returncode
        return error

    def _start_locust(self, command: list[str], log_path: Path) -> subprocess.Popen:
        """``command``'s Locust, writing to ``log_path``: the spare, given its arguments, or a new process."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.poll() is None:
            order = {"argv": command[len(LOCUST):], "log": str(log_path)}
            try:
                spare.stdin.write((json.dumps(order) + "\n").encode())
                spare.stdin.close()
                return spare
            except OSError:  # it ended just now
                pass
        if spare is not None:
            _end_spare(spare)
        with log_path.open("w") as log:
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=REPO_ROOT, start_new_session=True)

    def start_spare(self) -> None:
        """Start the next cell's Locust (its output until then kept in a file of its own, carried to the log)."""
        if self._spare is not None and self._spare.poll() is None:
            return  # one is waiting already
        try:
            with tempfile.TemporaryFile() as early:
                self._spare = subprocess.Popen(SPARE, stdin=subprocess.PIPE, stdout=early, stderr=subprocess.STDOUT,
                                               cwd=REPO_ROOT, start_new_session=True)
        except OSError:
            self._spare = None  # the next cell starts its own

    def close(self) -> None:
        """End the spare Locust, if any: its input closed, it exits; killed if it has not in SPARE_EXIT_S."""
        spare, self._spare = self._spare, None
        if spare is not None:
            _end_spare(spare)

    def _outcome(self, cell: Cell, files: CellFiles, error: str) -> CellResult:
        raw_log = files.raw_log
        results = read_results(raw_log) if raw_log.is_file() else []
        measured = [r for r in results if not r.warmup]
        summary = summarize(results) if measured else None
        if self.stop.requested:
            name = signal.Signals(self.stop.signum).name
            cell.status = "interrupted"
            cell.error = (f"stopped by {name} after {len(measured)} of {self.options.requests_for(cell)} requests"
                          + (f"; {error}" if error else ""))
        else:
            status = "failed"
            if not error and not raw_log.is_file():
                error = f"Locust exited with {cell.exit_code} and wrote no raw log (see {files.locust_log.name})"
            elif not error and not measured:
                error = "no request completed"
            elif (not error and summary is not None and cell.exit_code == ERROR_RATE_EXIT_CODE
                  and self.options.max_error_rate is not None):
                status = ERROR_RATE
                error = (f"stopped early: {summary.failures} of {summary.requests - (summary.cancelled or 0)} "
                         f"requests failed ({summary.failure_pct or 0:.1f} %), more than --max-error-rate "
                         f"{self.options.max_error_rate:g}")
            elif not error and summary is not None and summary.failures == summary.requests:
                first = next(r.error for r in measured if not r.success)
                error = f"all {summary.failures} requests failed: {first}"
            cell.status, cell.error = (status, error) if error else ("ok", "")
        return CellResult(results, summary)


def _end_spare(spare: subprocess.Popen) -> None:
    try:
        spare.stdin.close()
        spare.wait(SPARE_EXIT_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    _signal(spare, signal.SIGKILL, group=True)
    spare.wait()


def _signal(proc: subprocess.Popen, signum: int, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass
