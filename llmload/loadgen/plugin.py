"""The Locust integration's run lifecycle: one :class:`LoadPlugin` per Locust environment, wiring the parts.

Importing this module registers its listeners on ``locust.events`` (the
locustfiles import it through :mod:`llmload.loadgen.user`). The parts, each
testable without Locust where it can be:

* tickets (:mod:`~llmload.loadgen.budget`, :mod:`~llmload.loadgen.schedule`):
  ``--requests``, ``--warmup`` and ``--rate`` over all users and workers, in blocks;
* the results sink (:mod:`~llmload.loadgen.sink`): every result counted once,
  where it was measured, into the raw log (a worker's own shard), the live
  board and Locust's rows (:mod:`~llmload.loadgen.rows`);
* the live aggregates (:mod:`~llmload.loadgen.live`), merged on a master;
* the distributed protocol (:mod:`~llmload.loadgen.cluster`) and its two
  sides (:mod:`~llmload.loadgen.master`, :mod:`~llmload.loadgen.worker`);
* outputs (:mod:`~llmload.loadgen.outputs`), what the run says while it runs
  (:mod:`~llmload.loadgen.watch`), the resource monitor
  (:mod:`~llmload.loadgen.monitor`), prompts and model (:mod:`~llmload.loadgen.prompts`).

Standalone, one process does everything. In a distributed run each worker
counts its own results and sends the master, in Locust's worker report (every
3 s, and once more when it stops), its board's delta and its shard's new bytes;
the master merges them into its board, its Locust stats (Locust's own report)
and the run's raw log. Tickets come from the master in blocks.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import time
import uuid
import weakref
from pathlib import Path

import gevent

import locust
from locust.runners import STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner

from llmload.core import cliargs
from llmload.core.cancel import CancelPoint, CancelPolicy
from llmload.core.records import DatasetError, PromptRecord
from llmload.core.rawlog import RawLogWriter
from llmload.loadgen.budget import Budget, Ticket, TicketPool
from llmload.loadgen.clock import LoopProbe
from llmload.loadgen.cluster import REPORT_KEY, code_version, fingerprint, shard_folder
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.master import MasterRole
from llmload.loadgen.monitor import ResourceMonitor
from llmload.loadgen.options import (ERROR_RATE_EXIT_CODE, LoadSettings, SettingsError, add_arguments,
                                     strict_parsing)
from llmload.loadgen.outputs import end_line, stop_locust_csv_writer, summary_data, write_final_csv, write_json
from llmload.loadgen.prometheus import Exporter, Scrape
from llmload.loadgen.prompts import ModelLookup, Prompts, TraceReplay
from llmload.loadgen.rows import LocustRows
from llmload.loadgen.schedule import Schedule, TraceSchedule
from llmload.loadgen.sink import ResultSink
from llmload.loadgen.tracing import ClientSpans
from llmload.loadgen.watch import NO_SERVER_S, Watch
from llmload.loadgen.worker import WorkerRole

log = logging.getLogger("llmload")

TICKET_WAIT_S = 60.0


class LoadPlugin:
    """The state of one Locust environment: settings, prompts, model, tickets, results, live figures."""

    def __init__(self, environment):
        self.environment = environment
        self.settings = LoadSettings.from_options(environment.parsed_options)
        self.started_with = self.settings  # a worker's own options, before the master's arrive
        self.sink = ResultSink(None, None)
        self.budget: Budget | None = None
        self.pool = TicketPool()
        self.master: MasterRole | None = None
        self.worker: WorkerRole | None = None
        self.monitor = ResourceMonitor()
        self.probe = LoopProbe(lambda: self.sink.in_flight > 0)
        self.exporter: Exporter | None = None
        self.tracing: ClientSpans | None = None  # --otel-endpoint: this process's requests as spans
        self._run_id = ""  # standalone; a distributed run's is the master's
        self.watch = Watch()
        self.finishing = False
        self.stopped = False
        self.stop_signalled = False
        self.failed = ""
        self.stopped_early = ""  # why --max-error-rate stopped the run ("": it did not)
        self._fingerprint: dict | None = None
        self._prompts = Prompts()
        self._model = ModelLookup()
        self._trace = None  # the --trace replay, built in a thread of the hub's pool: (its key, its result)
        self._greenlets: list[gevent.Greenlet] = []
        self.cancels: CancelPolicy | None = None

    # ------------------------------------------------------------------ roles and parts

    @property
    def runner(self):
        return self.environment.runner

    @property
    def is_worker(self) -> bool:
        return isinstance(self.runner, WorkerRunner)

    @property
    def is_master(self) -> bool:
        return isinstance(self.runner, MasterRunner)

    @property
    def node_name(self) -> str:
        """The worker's Locust client id ('' when standalone)."""
        return getattr(self.runner, "client_id", "") if self.is_worker else ""

    @property
    def board(self) -> LiveBoard:
        return self.sink.board

    @property
    def raw_log(self) -> RawLogWriter | None:
        return self.sink.raw_log

    @property
    def run_id(self) -> str:
        """The current run's id (a distributed run's is the master's): the ``run`` of the summary and /metrics."""
        if self.master is not None:
            return self.master.run
        return self.worker.run if self.worker is not None else self._run_id

    @property
    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.started_with, self.tasks(), code_version())
        return self._fingerprint

    def user_classes(self) -> list:
        return list(self.environment.user_classes or [])

    def tasks(self) -> list[str]:
        """The tasks of the selected user classes."""
        return sorted({c.task_name for c in self.user_classes() if getattr(c, "task_name", "")})

    # ------------------------------------------------------------------ lifecycle

    def on_init(self) -> None:
        """Check the options, the host and the prompt files; register messages, the web UI and the load shape."""
        self.settings.check()
        if not self.is_worker:  # a worker's options (and so its --dataset) arrive from the master later
            if not self.environment.host and not any(getattr(c, "host", None) for c in self.user_classes()):
                raise SettingsError("no server to load: pass -H http://host:port (or set host = ... in locust.conf)")
            if self.settings.trace and self.settings.warmup >= self.request_limit:  # a bad trace: said here
                raise SettingsError(f"--warmup {self.settings.warmup} must be smaller than the --trace's "
                                    f"{self.request_limit} requests in its window")
            for task in self.tasks() if not self.settings.trace else ():
                self.prompts(task)
            if self.settings.api != "chat" and any(getattr(c, "needs_chat", False) for c in self.user_classes()):
                raise SettingsError("conversations carry their history as chat messages: use --api chat")
        self.set_role()
        if self.settings.prometheus_port is not None and not self.is_worker and self.exporter is None:
            self.exporter = Exporter(self._scrape)
            self.exporter.start(self.settings.prometheus_host, self.settings.prometheus_port)
        if self.settings.shape and not self.is_worker:
            from llmload.loadgen.shapes import install_shape  # imports locust's shape machinery only when asked

            install_shape(self.environment, self.settings.shape)
        if getattr(self.environment, "web_ui", None) is not None:
            from llmload.loadgen.webui import install  # flask: only with the web UI

            install(self.environment, self)

    def set_role(self) -> None:
        """A master or a worker: its side of the protocol, and its messages."""
        if self.runner is None or self.master is not None or self.worker is not None:
            return
        if self.is_worker:
            self.worker = WorkerRole(self)
            self.worker.register()
        elif self.is_master:
            self.master = MasterRole(self)
            self.master.register()

    def on_test_start(self) -> None:
        # Workers get the master's options just before test_start: read them again.
        self.settings = LoadSettings.from_options(self.environment.parsed_options)
        self.finishing, self.stopped, self.watch, self.stopped_early = False, False, Watch(), ""
        self.cancels = self.settings.cancel_policy(self.node_name)
        # SIGTERM and Ctrl-C: one orderly stop (Locust's own SIGTERM handler exits twice and prints a
        # SystemExit traceback; a KeyboardInterrupt lands in whichever user greenlet is running).
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        self.pool = TicketPool()
        if self.raw_log is not None:
            self.raw_log.close()
        rows = LocustRows(self.environment, self.settings)
        if self.worker is not None:
            self.sink = self.worker.start(self.settings, rows)
            if self.settings.trace:
                self.trace(wait=False)  # the master's --trace: built while the users start
        else:
            self._start_lead(rows)
        if self.master is None and self.settings.otel_endpoint and self.tracing is None:
            # the processes that send requests export their own spans (set up before the loop probe starts)
            self.tracing = ClientSpans(self.settings.otel_endpoint, self.environment.host or "", self.node_name)
            self.tracing.start()
        if self.master is None:  # the processes that send requests measure their own timing error
            self.board.clock[""] = self.probe.start()
        self._spawn(self._tick)

    def _start_lead(self, rows: LocustRows) -> None:
        """Standalone or master: the budget, the run's raw log, the board, the monitor."""
        settings = self.settings
        schedule = None
        if settings.trace:
            schedule = TraceSchedule(self.trace().offsets)
        elif settings.open_loop:
            schedule = Schedule(settings.rate, settings.arrival_law, settings.burstiness, settings.seed)
        self.budget = Budget(self.request_limit, settings.warmup, schedule) if self.needs_tickets else None
        path = settings.raw_log_path or self._web_ui_raw_log()
        self._run_id = uuid.uuid4().hex[:12]
        self.sink = ResultSink(settings.slo, None, rows, histograms=settings.prometheus_port is not None)
        if path is not None:
            try:
                self.sink.raw_log = RawLogWriter(path)
            except OSError as exc:
                self.fail_raw_log(path, exc)
        if self.master is not None:
            self.master.start(self.sink, self.budget, path)
        self.monitor.start(settings)

    def on_test_stop(self) -> None:
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._greenlets = []
        self.probe.stop()
        if self.worker is not None:
            self.worker.send_final(self.worker.run)
            return
        if self.master is not None:
            self.master.gather_finals()
        if self.raw_log is not None:
            self.raw_log.flush()
        self.monitor.stop()
        self.stopped = True
        if not self.failed:
            self.write_summary()
        self._say()

    def on_quit(self) -> None:
        if self.tracing is not None:
            self.tracing.close()
        if self.is_worker:
            return
        self.monitor.stop()
        if self.exporter is not None:
            self.exporter.stop()
        if getattr(self.environment.parsed_options, "html_file", None):
            from llmload.loadgen.webui import write_html_extras  # flask: only for --html

            write_html_extras(self.environment, self)
        if self.settings.csv_prefix:
            stop_locust_csv_writer()
            write_final_csv(self.environment, self.settings.csv_prefix)
        path = self.raw_log.path if self.raw_log is not None else None
        if self.raw_log is not None:
            self.raw_log.close()
            if self.master is not None:
                try:
                    shard_folder(path).rmdir()
                except OSError:
                    pass  # not there (the workers deleted it), or a shard is left: a warning named it
        if self.board.total().requests:
            log.info(end_line(self.board, path, self.settings.price_per_hour))
        self._say(final=True)

    def _scrape(self) -> Scrape:
        return Scrape(self.run_id, self.board, getattr(self.runner, "user_count", 0))

    def _web_ui_raw_log(self) -> Path | None:
        """With the web UI and no --csv/--raw-log: a temporary raw log, so that the UI's download works."""
        if getattr(self.environment, "web_ui", None) is None:
            return None
        path = Path(tempfile.gettempdir()) / f"llmload-{os.getpid()}_requests.jsonl"
        log.info(f"llmload: raw log {path} (give --csv PREFIX or --raw-log PATH to keep it elsewhere)")
        return path

    def _on_stop_signal(self, signum, _frame) -> None:
        if self.stop_signalled:
            if signum == signal.SIGINT:  # a second Ctrl-C: what is on disk stays, the rest is dropped
                if self.raw_log is not None:
                    self.raw_log.flush()
                log.warning("llmload: second Ctrl-C: stopping at once")
                os._exit(130)
            return  # a repeated SIGTERM (e.g. from a process group and a parent): already stopping
        self.stop_signalled = True
        log.info(f"llmload: got {signal.Signals(signum).name}, stopping (Ctrl-C again to stop at once)")
        self.finishing = True
        gevent.spawn(self._quit_all)

    def _quit_all(self) -> None:
        """Stop the users and the web UI (which would keep the process alive), as the end of ``-t`` does."""
        self.runner.quit()
        if getattr(self.environment, "web_ui", None) is not None:
            self.environment.web_ui.stop()

    def _spawn(self, function, *args) -> None:
        self._greenlets.append(gevent.spawn(function, *args))

    def _tick(self) -> None:
        """Once a second: flush the raw log (or shard), watch the workers, keep a point of history, warn."""
        while True:
            gevent.sleep(1.0)
            try:
                if self.raw_log is not None and not self.raw_log.closed:
                    self.raw_log.flush()
            except OSError as exc:
                self.fail_raw_log(self.raw_log.path, exc)
                return
            if self.worker is not None:
                if self.needs_tickets:
                    self.worker.give_back_if_idle()
                continue
            if self.master is not None:
                self.master.check_members(running=self.runner.state in (STATE_RUNNING, STATE_SPAWNING))
                self.board.complete_until = self.master.complete_until()
                self.check_error_rate()
            self.board.snapshot(users=getattr(self.runner, "user_count", 0))
            self._say()

    def fail(self, reason: str) -> None:
        """This process cannot go on (its raw log or shard cannot be written): one line, exit code 2; a worker
        tells the master first, which names it and gives its tickets to the others."""
        if self.failed:
            return
        self.failed = reason
        self.environment.process_exit_code = cliargs.print_error(reason)
        gevent.spawn(self._stop_failed, reason)

    def fail_raw_log(self, path: str | os.PathLike, exc: OSError, what: str = "raw log") -> None:
        """:meth:`fail` because the raw log (``what``: a worker's ``raw-log shard``) at ``path`` cannot be written."""
        self.fail(f"cannot write the {what} {path}: {exc.strerror or exc}")

    def _stop_failed(self, reason: str) -> None:
        if self.worker is not None:
            self.worker.stop_failed(reason)
        self._quit_all()

    # ------------------------------------------------------------------ prompts and model

    def prompts(self, task: str) -> list[PromptRecord]:
        return self._prompts.records(self.settings.dataset_for(task))

    def trace(self, wait: bool = True) -> TraceReplay | None:
        """The ``--trace`` replay of the current settings, read and built once, in a thread: loading the tokenizer
        takes seconds, in which a worker's heartbeats must go on. Raises :class:`DatasetError` for a bad trace."""
        key = TraceReplay.key_of(self.settings)
        if self._trace is None or self._trace[0] != key:
            self._trace = key, gevent.get_hub().threadpool.spawn(_built_or_error, self.settings)
        if not wait:
            return None
        replay = self._trace[1].get()
        if isinstance(replay, DatasetError):
            raise replay
        return replay

    @property
    def request_limit(self) -> int:
        """Requests the run sends in all (0: no limit): ``--requests``, or the ``--trace``'s in its window."""
        return len(self.trace().requests) if self.settings.trace else self.settings.requests

    def next_prompt(self, task: str, ticket: Ticket | None = None) -> PromptRecord:
        """The ``--trace``'s request of ``ticket``'s index; else the next record of ``task``'s prompt file, in
        file order, cycling (workers start at different places)."""
        if self.settings.trace and ticket is not None and ticket.index >= 0:
            return self.trace().record(ticket.index)
        index = getattr(self.runner, "worker_index", 0) if self.is_worker else 0
        return self._prompts.next(task, self.settings.dataset_for(task), index)

    def resolve_model(self, client) -> tuple[str, str, bool]:
        """``(model, error, unreachable)``: ``--model``, or the server's first listed model (``--model-timeout``)."""
        if self.settings.model:
            return self.settings.model, "", False
        return self._model.resolve(client, self.settings.model_timeout)

    # ------------------------------------------------------------------ tickets and results

    @property
    def needs_tickets(self) -> bool:
        s = self.settings
        return bool(s.requests or s.warmup or s.open_loop)

    def acquire(self, scheduled: bool = True) -> Ticket | None:
        """A ticket for one request, or None while there is none to be had (``--requests`` used up).

        ``scheduled=False``: a follow-up turn (see :meth:`Budget.grant`).
        """
        if not self.needs_tickets:
            self.sink.started()
            return Ticket(-1)
        if self.settings.trace:
            try:
                self.trace()  # built before the first ticket is asked for: the schedule starts with that
            except DatasetError as exc:  # only on a worker: standalone and master check the trace at start
                self.fail(str(exc))
                return None
        deadline = time.monotonic() + TICKET_WAIT_S
        while True:
            ticket = self.pool.take(scheduled)
            if ticket is not None:
                self.sink.started(ticket.intended_start)
                self._ask(scheduled)  # the next block, before this one runs out
                return ticket
            if self.pool.exhausted:
                return None
            arrival = self.worker.arrival if self.worker is not None else None
            self._ask(scheduled)
            if arrival is not None and self.pool.asking[scheduled]:  # wait for the master's answer
                try:
                    arrival.get(timeout=max(deadline - time.monotonic(), 0.0))
                except gevent.Timeout:
                    log.warning(f"llmload: no answer from the master about the request budget in "
                                f"{TICKET_WAIT_S:.0f} s")
                    self.pool.asking[scheduled] = False
                    return None

    def _ask(self, scheduled: bool) -> None:
        """Ask for the next block when the pool wants one: from the master, or from this process's budget."""
        users = getattr(self.runner, "user_count", 1)
        count = self.pool.want(users, scheduled)
        if not count:
            return
        if self.worker is not None:
            self.worker.ask(count, scheduled, users)
        elif self.budget is not None:
            self.pool.add(self.budget.grant("", count, scheduled))

    def cancel_point(self, ticket: Ticket) -> CancelPoint | None:
        """Where the request of ``ticket`` is abandoned (``--cancel-rate``/``--cancel-after``), or None."""
        return self.cancels.point(ticket.index) if self.cancels is not None else None

    def report(self, result) -> None:
        """A user's result: counted here, where it was measured."""
        try:
            metrics = self.sink.collect(result)
        except OSError as exc:
            self.fail_raw_log(self.raw_log.path, exc)
            return
        if self.tracing is not None:
            self.tracing.add(result, metrics, self.settings.model or self._model.known)
        if self.worker is not None:
            self.worker.report_if_drained()
        else:
            self.check_requests_done(self.sink.done)
            self.check_error_rate()

    def check_error_rate(self) -> None:
        """Stop the run (exit code :data:`ERROR_RATE_EXIT_CODE`) once its failed share passes --max-error-rate,
        judged when enough requests ended (standalone: each result; a master: each second, from its board)."""
        limit = self.settings.max_error_rate
        if limit is None or self.finishing:
            return
        judged, failed = self.board.failure_counts()
        if judged < self.settings.error_rate_min or failed <= limit * judged:
            return
        self.finishing = True
        self.stopped_early = (f"{failed} of {judged} requests failed ({100.0 * failed / judged:.1f} %), more than "
                              f"--max-error-rate {limit:g}")
        self.environment.process_exit_code = ERROR_RATE_EXIT_CODE
        log.error(f"llmload: error: {self.stopped_early}: the run stops early (exit code {ERROR_RATE_EXIT_CODE})")
        gevent.spawn(self._finish, "--max-error-rate passed")

    def check_requests_done(self, completed: int) -> None:
        limit = self.request_limit
        if limit and completed >= limit and not self.finishing:
            self.finishing = True
            why = "the trace's requests" if self.settings.trace else f"--requests {limit}"
            gevent.spawn(self._finish, f"{completed} requests done ({why})")

    def _finish(self, why: str) -> None:
        options = self.environment.parsed_options
        log.info(f"llmload: {why}, stopping")
        if options is not None and getattr(options, "headless", False):
            self.runner.quit()
            return
        self.runner.stop()  # the web UI stays up with the final figures
        autoquit = getattr(options, "autoquit", -1)
        if getattr(options, "autostart", False) and autoquit != -1:  # as Locust does at the end of -t
            gevent.sleep(autoquit)
            self.runner.quit()
            if self.environment.web_ui is not None:
                self.environment.web_ui.stop()

    # ------------------------------------------------------------------ what the run says

    def _say(self, final: bool = False) -> None:
        """Warn once if the generator fell behind; say once that no server answers, and stop the run."""
        options = self.environment.parsed_options
        line = self.watch.behind(self.board, getattr(options, "num_users", None), final) \
            if self.settings.open_loop else None
        if line:
            log.warning(line)
        line = None if final else self.watch.no_server(self.board, self.environment.host, at_stop=self.stopped)
        if line:
            log.error(line)
            if not self.finishing:
                self.finishing = True
                gevent.spawn(self._finish, f"nothing answered for {NO_SERVER_S:.0f} s")

    def write_summary(self) -> Path | None:
        """Write ``<prefix>_summary.json``: the run's figures, so scripts need not parse the summary line."""
        path = self.settings.summary_path
        if path is None:
            return None
        data = summary_data(self.board, self.settings, getattr(self.environment.parsed_options, "num_users", None),
                            self.watch.lag_warned, self.raw_log.path if self.raw_log is not None else None,
                            self.master.workers_summary() if self.master is not None else None, self.run_id,
                            self.stopped_early)
        try:
            return write_json(path, data)
        except OSError as exc:
            log.error(f"llmload: cannot write the summary {path}: {exc.strerror or exc}")
            return None


def _built_or_error(settings) -> TraceReplay | DatasetError:
    """The replay, or the error that says why not (as a value: the pool's thread would print its traceback)."""
    try:
        return TraceReplay(settings)
    except DatasetError as exc:
        return exc


_PLUGINS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def plugin_for(environment) -> LoadPlugin:
    """The :class:`LoadPlugin` of ``environment`` (created on first use)."""
    plugin = _PLUGINS.get(environment)
    if plugin is None:
        plugin = _PLUGINS[environment] = LoadPlugin(environment)
    return plugin


# ---------------------------------------------------------------------- Locust event listeners


@locust.events.init_command_line_parser.add_listener
def _on_parser(parser, **_kw) -> None:
    add_arguments(parser)
    strict_parsing(parser)


@locust.events.init.add_listener
def _on_init(environment, **_kw) -> None:
    try:
        plugin_for(environment).on_init()
    except (SettingsError, DatasetError) as exc:
        # one line, no traceback, argparse's exit code for bad input (SystemExit passes through Locust's event hook)
        cliargs.fail(str(exc))


@locust.events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    plugin_for(environment).on_test_start()


@locust.events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    plugin_for(environment).on_test_stop()


@locust.events.report_to_master.add_listener
def _on_report_to_master(client_id, data, **_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        plugin.set_role()  # a report before init (it comes after, as Locust 2.47 runs): the role is needed now
        if plugin.worker is not None:
            data[REPORT_KEY] = plugin.worker.part()


@locust.events.worker_report.add_listener
def _on_worker_report(client_id, data, **_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        if plugin.master is not None:
            plugin.master.on_worker_report(client_id, data)


@locust.events.quit.add_listener
def _on_quit(**_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        plugin.on_quit()
