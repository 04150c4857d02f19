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
* the distributed protocol (:mod:`~llmload.loadgen.cluster`);
* outputs (:mod:`~llmload.loadgen.outputs`) and the resource monitor
  (:mod:`~llmload.loadgen.monitor`).

Roles: standalone, one process does everything. In a distributed run each
worker counts its own results and sends the master, in Locust's worker report
(every 3 s, and once more when it stops), its board's delta and its shard's new
bytes; the master merges them into its board, its Locust stats (Locust's own
report), and the run's raw log. Tickets come from the master in blocks.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import signal
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path

import gevent
from gevent.event import AsyncResult

import locust
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner, WorkerRunner
from locust.stats import StatsEntry

from llmload.core.records import DatasetError, PromptRecord, load_prompts
from llmload.core.rawlog import RawLogWriter
from llmload.core.transport import TransportError
from llmload.core.wire import WireError
from llmload.loadgen.budget import Block, Budget, Ticket, TicketPool
from llmload.loadgen.cluster import (MSG_ASK, MSG_FAILED, MSG_GRANT, MSG_MERGED, MSG_MORE, MSG_REFUSED, MSG_STOP,
                                     REPORT_KEY, Cluster, code_version, fingerprint, mismatch, shard_folder,
                                     shard_path)
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.monitor import ResourceMonitor
from llmload.loadgen.options import LoadSettings, SettingsError, add_arguments, strict_parsing
from llmload.loadgen.outputs import (end_line, stop_locust_csv_writer, summary_data, write_final_csv, write_json)
from llmload.loadgen.rows import LocustRows
from llmload.loadgen.schedule import Schedule
from llmload.loadgen.sink import ResultSink

log = logging.getLogger("llmload")

TICKET_WAIT_S = 60.0
#: The dispatch lag (p99 over the last seconds) past which the load generator says it fell behind.
LAG_WARN_MS = 5.0
#: A run in which nothing answered for this long from its first request stops with one line.
NO_SERVER_S = 10.0
#: Seconds the master waits, when a run stops, for every worker's last report.
FINAL_WAIT_S = 15.0
#: The attribute of Locust's options that carries the run (its id, the shard folder) to the workers.
RUN_OPTION = "llmload_run"


class LoadPlugin:
    """The state of one Locust environment: settings, prompts, model, tickets, results, live figures."""

    def __init__(self, environment):
        self.environment = environment
        self.settings = LoadSettings.from_options(environment.parsed_options)
        self.started_with = self.settings  # a worker's own options, before the master's arrive
        self.sink = ResultSink(None, None)
        self.budget: Budget | None = None
        self.pool = TicketPool()
        self.cluster: Cluster | None = None
        self.run = ""
        self.monitor = ResourceMonitor()
        self.finishing = False
        self.lag_warned = False
        self.no_server_said = False
        self.stop_signalled = False
        self.failed = ""
        self.verified: set[str] = set()
        self.refused: set[str] = set()
        self._fingerprint: dict | None = None
        self._final_for: str | None = None
        self._final_sent = False
        self._drained = False
        self._told_exhausted = False
        self._returned = 0  # tickets a worker gave back since its last report
        self._arrival = AsyncResult()
        self._model = AsyncResult()
        self._model_lookup: gevent.Greenlet | None = None
        self._prompts: dict[Path, list[PromptRecord]] = {}
        self._cursors: dict[str, itertools.count] = {}
        self._greenlets: list[gevent.Greenlet] = []
        self._registered = False

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
            for task in self.tasks():
                self.prompts(task)
            if self.settings.api != "chat" and any(getattr(c, "needs_chat", False) for c in self.user_classes()):
                raise SettingsError("conversations carry their history as chat messages: use --api chat")
        self.register_messages()
        if self.settings.shape and not self.is_worker:
            from llmload.loadgen.shapes import install_shape  # imports locust's shape machinery only when asked

            install_shape(self.environment, self.settings.shape)
        if getattr(self.environment, "web_ui", None) is not None:
            from llmload.loadgen.webui import install  # flask: only with the web UI

            install(self.environment, self)

    def register_messages(self) -> None:
        if self._registered or self.runner is None:
            return
        handlers = {}
        if self.is_worker:
            handlers = {MSG_GRANT: self._on_grant, MSG_MORE: self._on_more, MSG_STOP: self._on_stop,
                        MSG_MERGED: self._on_merged, MSG_REFUSED: self._on_refused}
        elif self.is_master:
            handlers = {MSG_ASK: self._on_ask, MSG_FAILED: self._on_failed}
        for kind, handler in handlers.items():
            self.runner.register_message(kind, handler)
        self._registered = True

    def on_test_start(self) -> None:
        # Workers get the master's options just before test_start: read them again.
        self.settings = LoadSettings.from_options(self.environment.parsed_options)
        self.finishing, self.lag_warned, self.no_server_said = False, False, False
        self._final_for, self._final_sent, self._drained, self._told_exhausted = None, False, False, False
        self._returned = 0
        # SIGTERM and Ctrl-C: one orderly stop (Locust's own SIGTERM handler exits twice and prints a
        # SystemExit traceback; a KeyboardInterrupt lands in whichever user greenlet is running).
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        self.pool = TicketPool()
        if self.is_worker:
            self._start_worker()
        else:
            self._start_lead()
        self._spawn(self._tick)

    def _start_lead(self) -> None:
        """Standalone or master: the budget, the run's raw log, the board, the monitor."""
        settings = self.settings
        schedule = Schedule(settings.rate, settings.arrival_law, settings.burstiness,
                            settings.seed) if settings.open_loop else None
        self.budget = Budget(settings.requests, settings.warmup, schedule) if self.needs_tickets else None
        if self.raw_log is not None:
            self.raw_log.close()
        path = settings.raw_log_path or self._web_ui_raw_log()
        self.sink = ResultSink(settings.slo, RawLogWriter(path) if path is not None else None,
                               LocustRows(self.environment, settings))
        if self.is_master:
            self.run = uuid.uuid4().hex[:12]
            self.cluster = Cluster(self.run, self.sink, self.budget)
            folder = shard_folder(path) if path is not None else None
            setattr(self.environment.parsed_options, RUN_OPTION,
                    {"id": self.run, "shards": str(folder) if folder else None})
            self.board.complete_until = self.cluster.started
        self.monitor.start(settings)

    def _start_worker(self) -> None:
        """A worker: this run's id and shard, from the master's options."""
        run = getattr(self.environment.parsed_options, RUN_OPTION, None) or {}
        self.run = run.get("id", "")
        if self.raw_log is not None:
            self.raw_log.close()
        self.sink = ResultSink(self.settings.slo, None, LocustRows(self.environment, self.settings), delta=True)
        if run.get("shards"):
            path = shard_path(Path(run["shards"]), self.runner.worker_index, self.node_name)
            try:
                self.sink.raw_log = RawLogWriter(path, keep=True)
            except OSError as exc:
                self.fail(f"cannot write the raw-log shard {path}: {exc.strerror or exc}")

    def on_test_stop(self) -> None:
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._greenlets = []
        if self.is_worker:
            self.send_final(self.run)
            return
        if self.is_master:
            self._gather_finals()
        if self.raw_log is not None:
            self.raw_log.flush()
        self.monitor.stop()
        self.write_summary()
        self._check_no_server(at_stop=True)

    def on_quit(self) -> None:
        if self.is_worker:
            return
        self.monitor.stop()
        if getattr(self.environment.parsed_options, "html_file", None):
            from llmload.loadgen.webui import write_html_extras  # flask: only for --html

            write_html_extras(self.environment, self)
        if self.settings.csv_prefix:
            stop_locust_csv_writer()
            write_final_csv(self.environment, self.settings.csv_prefix)
        path = self.raw_log.path if self.raw_log is not None else None
        if self.raw_log is not None:
            self.raw_log.close()
            self._remove_empty_shard_folder(path)
        if self.board.total().requests:
            log.info(end_line(self.board, path, self.settings.price_per_hour))
        self._warn_if_behind(final=True)

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
                self.fail(f"cannot write the raw log {self.raw_log.path}: {exc.strerror or exc}")
                return
            if self.is_worker:
                self._give_back_if_idle()
                continue
            if self.is_master:
                self._check_members()
                self.board.complete_until = self.cluster.complete_until(self._running_nodes())
            self.board.snapshot(users=getattr(self.runner, "user_count", 0))
            self._warn_if_behind()
            self._check_no_server()

    def fail(self, reason: str) -> None:
        """This process cannot go on (its raw log or shard cannot be written): one line, exit code 2; a worker
        tells the master first, which names it and gives its tickets to the others."""
        if self.failed:
            return
        self.failed = reason
        sys.stderr.write(f"error: {reason}\n")
        self.environment.process_exit_code = 2
        gevent.spawn(self._stop_failed)

    def _stop_failed(self) -> None:
        if self.is_worker:
            self.runner.stop()  # its last report goes out (test_stop), with what it measured
            self.send_final(self.run)
            self.runner.send_message(MSG_FAILED, {"run": self.run, "reason": self.failed})
        self._quit_all()

    # ------------------------------------------------------------------ prompts and model

    def prompts(self, task: str) -> list[PromptRecord]:
        path = self.settings.dataset_for(task)
        if path not in self._prompts:
            self._prompts[path] = load_prompts(path)
        return self._prompts[path]

    def next_prompt(self, task: str) -> PromptRecord:
        """The next record of ``task``'s prompt file, in file order, cycling (workers start at different places)."""
        records = self.prompts(task)
        if task not in self._cursors:
            index = getattr(self.runner, "worker_index", 0) if self.is_worker else 0
            start = random.Random(index).randrange(len(records)) if index else 0
            self._cursors[task] = itertools.count(start)
        return records[next(self._cursors[task]) % len(records)]

    def resolve_model(self, client) -> tuple[str, str, bool]:
        """``(model, error, unreachable)``: ``--model``, or the server's first listed model, looked up once per
        process with ``--model-timeout`` (every user waits for the same look-up; a failed one is retried)."""
        if self.settings.model:
            return self.settings.model, "", False
        if not self._model.ready() and self._model_lookup is None:
            self._model_lookup = gevent.spawn(self._look_up_model, client)
        try:
            model = self._model.get(timeout=self.settings.model_timeout + 1.0)
        except gevent.Timeout:
            return "", f"cannot find the model to use: /v1/models did not answer within " \
                       f"{self.settings.model_timeout:g} s (pass --model to skip the look-up)", False
        except (TransportError, WireError) as exc:
            return "", f"cannot find the model to use: {exc} (pass --model to skip the look-up)", \
                getattr(exc, "unreachable", False)
        return model, "", False

    def _look_up_model(self, client) -> None:
        try:
            model = client.list_first_model(self.settings.model_timeout)
        except (TransportError, WireError) as exc:
            failed, self._model = self._model, AsyncResult()
            self._model_lookup = None  # the next user tries again
            failed.set_exception(exc)
            return
        log.info(f"llmload: using model {model!r} (the first listed at /v1/models)")
        self._model.set(model)

    # ------------------------------------------------------------------ tickets

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
        deadline = time.monotonic() + TICKET_WAIT_S
        while True:
            ticket = self.pool.take(scheduled)
            if ticket is not None:
                self.sink.started(ticket.intended_start)
                self._ask(scheduled)  # the next block, before this one runs out
                return ticket
            if self.pool.exhausted:
                return None
            arrival = self._arrival
            self._ask(scheduled)
            if self.pool.asking[scheduled]:  # a worker: wait for the master's answer
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
        if self.is_worker:
            self.pool.asked(scheduled)
            shard = str(self.raw_log.path.resolve()) if self.raw_log is not None else None
            self.runner.send_message(MSG_ASK, {"run": self.run, "count": count, "scheduled": scheduled,
                                               "users": users, "shard": shard})
        elif self.budget is not None:
            self.pool.add(self.budget.grant("", count, scheduled))

    def _on_grant(self, environment, msg, **_kw) -> None:
        if msg.data.get("run") != self.run:
            return
        self.pool.add(Block.from_wire(msg.data))
        arrival, self._arrival = self._arrival, AsyncResult()
        arrival.set(True)
        self._report_if_drained()

    def _on_more(self, environment, msg, **_kw) -> None:
        if msg.data.get("run") == self.run:
            self.pool.exhausted = False
            self._drained = False

    def _on_ask(self, environment, msg, **_kw) -> None:
        node, data = msg.node_id, msg.data
        scheduled = bool(data.get("scheduled", True))
        if data.get("run") != self.run or self.budget is None or node not in self.verified or \
                (node in self.cluster.members and self.cluster.members[node].gone):
            block = Block(0 if scheduled else -1, 0, exhausted=True)
        else:
            self.cluster.asked(node, data)
            block = self.budget.grant(node, int(data.get("count", 1)), scheduled, len(self._running_nodes()))
            self._told_exhausted = self._told_exhausted or block.exhausted
        self.runner.send_message(MSG_GRANT, {"run": self.run, **block.to_wire()}, client_id=node)

    def _tell_if_more(self) -> None:
        """Tickets came back (a lost worker's, an idle one's) after the workers heard there were none: say so."""
        if self._told_exhausted and self.budget is not None and not self.budget.exhausted:
            self._told_exhausted = False
            self.runner.send_message(MSG_MORE, {"run": self.run})

    def _give_back_if_idle(self) -> None:
        """A worker whose users are all gone (a load shape stepping down) returns the tickets in its hands."""
        if self.needs_tickets and getattr(self.runner, "user_count", 0) == 0 and self.pool.tickets:
            self._returned += self.pool.give_back()

    # ------------------------------------------------------------------ results

    def report(self, result) -> None:
        """A user's result: counted here, where it was measured."""
        try:
            self.sink.collect(result)
        except OSError as exc:
            self.fail(f"cannot write the raw log {self.raw_log.path}: {exc.strerror or exc}")
            return
        if self.is_worker:
            self._report_if_drained()
        else:
            self._check_requests_done(self.sink.done)

    def _report_if_drained(self) -> None:
        """A worker with nothing left to do (budget used up, nothing in flight) reports at once, so that the master
        can end the run by ``--requests`` without waiting for the next report."""
        if self.pool.exhausted and not self.pool.tickets and not self.sink.in_flight and not self._drained:
            self._drained = True
            self._send_report()

    def _send_report(self) -> None:
        """A Locust worker report now (Locust's stats and the suite's part, cut at one moment)."""
        data: dict = {}
        self.environment.events.report_to_master.fire(client_id=self.node_name, data=data)
        self.runner.send_message("stats", data)

    def send_final(self, run: str) -> None:
        """The worker's last report of ``run`` (everything it counted, its shard closed)."""
        if self._final_sent and run == self.run:
            return
        if run == self.run:
            self._final_sent = True
            if self.raw_log is not None and not self.raw_log.closed:
                try:
                    self.raw_log.close()
                except OSError as exc:  # its bytes go in the report anyway
                    log.error(f"llmload: cannot flush the raw-log shard {self.raw_log.path}: {exc}")
        self._final_for = run
        try:
            self._send_report()
        finally:
            self._final_for = None

    def worker_part(self) -> dict:
        """The suite's part of this worker's Locust report (see :mod:`llmload.loadgen.cluster`)."""
        part: dict = {"fp": self.fingerprint, "run": self._final_for or self.run}
        if self.run and part["run"] == self.run and not (self._final_sent and self._final_for is None):
            part["cut"] = self.sink.cut(self.pool.taken, getattr(self.runner, "user_count", 0)).to_wire()
            returned, self._returned = self._returned, 0
            if returned:
                part["returned"] = returned
        if self._final_for is not None:
            part["final"] = True
        return part

    def on_worker_report(self, node: str, data: dict) -> None:
        """The master: check a worker once, then merge the suite's part of each of its reports."""
        part = data.get(REPORT_KEY)
        if node in self.refused:
            _drop_locust_part(data, self.environment)
            return
        if node not in self.verified:
            reason = mismatch(fingerprint(self.settings, self.tasks(), self.fingerprint["code"]),
                              part.get("fp") if isinstance(part, dict) else None)
            if reason:
                self._refuse(node, reason)
                _drop_locust_part(data, self.environment)
                return
            self.verified.add(node)
        if self.cluster is None or not isinstance(part, dict) or part.get("run") != self.run:
            return
        member = self.cluster.members.get(node)
        if member is not None and member.gone:
            _drop_locust_part(data, self.environment)  # what it measured after it was declared lost stays out
            return
        member = self.cluster.report(node, part)
        if member is None:
            return
        if part.get("returned") and self.budget is not None:
            self.budget.give_back(node, part["returned"])
            self._tell_if_more()
        if part.get("final") and member.shard:
            if self.raw_log is not None:
                self.raw_log.flush()
            self.runner.send_message(MSG_MERGED, {"run": self.run, "offset": member.offset}, client_id=node)
        self._check_requests_done(self.cluster.completed)

    def _refuse(self, node: str, reason: str) -> None:
        """One line, and the worker is told why and to quit; it gets no users."""
        self.refused.add(node)
        log.error(f"llmload: refused worker {node}: {reason}")
        self.runner.send_message(MSG_REFUSED, {"reason": reason}, client_id=node)
        self.runner.send_message("quit", None, client_id=node)
        client = self.runner.clients.get(node)
        if client is not None:
            dispatcher = getattr(self.runner, "_users_dispatcher", None)
            if dispatcher is not None:
                dispatcher.remove_worker(client)
            del self.runner.clients[node]

    def _on_refused(self, environment, msg, **_kw) -> None:
        sys.stderr.write(f"error: the master refused this worker: {msg.data.get('reason')}\n")
        self.environment.process_exit_code = 2
        self.failed = "refused"

    def _on_stop(self, environment, msg, **_kw) -> None:
        """The master is ending the run: stop the users (their test_stop sends the last report), or just report."""
        run = msg.data.get("run", "")
        if run == self.run and not self._final_sent:
            self.runner.stop()
        self.send_final(run)

    def _on_merged(self, environment, msg, **_kw) -> None:
        """The master holds this worker's whole shard: delete it (and its folder, once empty)."""
        raw = self.raw_log
        if msg.data.get("run") != self.run or raw is None or msg.data.get("offset") != raw.size:
            return
        raw.close()
        try:
            raw.path.unlink()
            raw.path.parent.rmdir()
        except OSError:
            pass  # another worker's shard is still there, or it is already gone

    def _on_failed(self, environment, msg, **_kw) -> None:
        node, reason = msg.node_id, msg.data.get("reason", "")
        log.error(f"llmload: worker {node} stopped: {reason}")
        self.environment.process_exit_code = 1
        if self.cluster is not None and msg.data.get("run") == self.run:
            self._retire(node, "failed")

    def _running_nodes(self) -> list[str]:
        """Workers with users (or starting them) that are not missing."""
        clients = getattr(self.runner, "clients", {})
        return [node for node, c in clients.items() if c.state in (STATE_RUNNING, STATE_SPAWNING)] or \
            [node for node, c in clients.items() if c.state != STATE_MISSING]

    def _check_members(self) -> None:
        """Workers of this run that went missing (or left) without their last report: retire them."""
        clients = self.runner.clients
        nodes = set(self.cluster.members) | {n for n, held in (self.budget.held if self.budget else {}).items()
                                             if held}
        for node in sorted(nodes):
            member = self.cluster.member(node)
            client = clients.get(node)
            if member.active and (client is None or client.state == STATE_MISSING):
                self._retire(node, "lost")

    def _retire(self, node: str, why: str) -> None:
        retired = self.cluster.retire(node, why, self.settings.api, self.settings.mode, self.tasks())
        if why == "lost":
            log.warning(f"llmload: worker {node} was lost with {retired.lost} request(s) in flight: recorded as "
                        "lost, their tickets returned to the other workers"
                        + (f"; {retired.shard_note}" if retired.shard_note else ""))
        elif retired.lost or retired.shard_note:
            log.warning(f"llmload: worker {node}'s {retired.lost} request(s) in flight recorded as lost"
                        + (f"; {retired.shard_note}" if retired.shard_note else ""))
        self._tell_if_more()
        self._check_requests_done(self.cluster.completed)

    def _gather_finals(self) -> None:
        """The master, as a run stops: ask every worker still there for its last report and wait for them all
        (Locust's own quit waits only 0.5 s for the workers' last stats)."""
        if self.cluster is None:
            return
        clients = self.runner.clients
        waiting = []
        for node, client in clients.items():
            member = self.cluster.members.get(node)
            if client.state != STATE_MISSING and node not in self.refused and (member is None or member.active):
                self.runner.send_message(MSG_STOP, {"run": self.run}, client_id=node)
                waiting.append(node)
        deadline = time.monotonic() + FINAL_WAIT_S
        while time.monotonic() < deadline:
            pending = [n for n in waiting if n in clients and clients[n].state != STATE_MISSING
                       and self.cluster.member(n).active]
            if not pending:
                break
            gevent.sleep(0.05)
        self._check_members()
        self.board.complete_until = None  # every worker's last report is in (or it was retired)

    def _check_requests_done(self, completed: int) -> None:
        if self.settings.requests and completed >= self.settings.requests and not self.finishing:
            self.finishing = True
            gevent.spawn(self._finish, f"{completed} requests done (--requests {self.settings.requests})")

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

    def _warn_if_behind(self, final: bool = False) -> None:
        """One warning line, the first time the dispatch lag passes LAG_WARN_MS (or at the end, over the run)."""
        if self.lag_warned or not self.settings.open_loop:
            return
        if final:
            lag, where = self.board.total().get("dispatch_lag", "p99"), "over the run"
            lag = None if lag is None else lag * 1000.0
        else:
            lag, where = self.board.window().get("dispatch_lag_p99_ms"), "over the last seconds"
        if lag is None or lag <= LAG_WARN_MS:
            return
        self.lag_warned = True
        users = getattr(self.environment.parsed_options, "num_users", None)
        log.warning(f"llmload: warning: the load generator fell behind its schedule: dispatch lag p99 {lag:.1f} ms "
                    f"{where}; {self.board.counts.late} request(s) were due while all {users} users (-u) were busy: "
                    "raise -u, or add workers if the client's CPU is saturated")

    def _check_no_server(self, at_stop: bool = False) -> None:
        """One line saying what to do when the server refused every request; stop the run after NO_SERVER_S."""
        counts = self.board.counts
        if self.no_server_said or counts.successes or counts.first_failure is None:
            return
        if self.board.unreachable_so_far() <= 0:
            return  # failures of another kind: the server is there
        if not at_stop and time.time() - counts.first_failure < NO_SERVER_S:
            return
        self.no_server_said = True
        log.error(f"error: no server answered at {self.environment.host or 'the host'} (connection refused): start "
                  "it first (python -m server --port 8000, or python -m server.vllm_launcher), or point -H at it")
        if not self.finishing:
            self.finishing = True
            gevent.spawn(self._finish, f"nothing answered for {NO_SERVER_S:.0f} s")

    def write_summary(self) -> Path | None:
        """Write ``<prefix>_summary.json``: the run's figures, so scripts need not parse the summary line."""
        path = self.settings.summary_path
        if path is None:
            return None
        workers = None
        if self.cluster is not None:
            workers = [{"worker": m.node, "results": m.done, "left": m.gone or None}
                       for m in sorted(self.cluster.members.values(), key=lambda m: m.node)]
        data = summary_data(self.board, self.settings, getattr(self.environment.parsed_options, "num_users", None),
                            self.lag_warned, self.raw_log.path if self.raw_log is not None else None, workers)
        return write_json(path, data)

    def _remove_empty_shard_folder(self, raw_log: Path | None) -> None:
        if self.cluster is None or raw_log is None:
            return
        try:
            shard_folder(raw_log).rmdir()
        except OSError:
            pass  # not there (the workers deleted it), or a shard is left: the warnings above named it


def _drop_locust_part(data: dict, environment) -> None:
    """Empty Locust's stats in a worker report the master does not take (this module's listener runs first)."""
    data["stats"], data["errors"] = [], {}
    data["stats_total"] = StatsEntry(environment.stats, "Aggregated", None).serialize()


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
        sys.stderr.write(f"error: {exc}\n")
        raise SystemExit(2) from None


@locust.events.test_start.add_listener
def _on_test_start(environment, **_kw) -> None:
    plugin_for(environment).on_test_start()


@locust.events.test_stop.add_listener
def _on_test_stop(environment, **_kw) -> None:
    plugin_for(environment).on_test_stop()


@locust.events.report_to_master.add_listener
def _on_report_to_master(client_id, data, **_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        if plugin.is_worker:
            data[REPORT_KEY] = plugin.worker_part()


@locust.events.worker_report.add_listener
def _on_worker_report(client_id, data, **_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        if plugin.is_master:
            plugin.on_worker_report(client_id, data)


@locust.events.quit.add_listener
def _on_quit(**_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        plugin.on_quit()
