"""The Locust integration: options, tickets, results into Locust's stats, the raw log, live figures, faults.

Importing this module registers its listeners on ``locust.events`` (the
locustfiles import it through :mod:`llmload.loadgen.user`). One
:class:`LoadPlugin` per Locust environment holds the run's state.

Where results go: every :class:`~llmload.core.metrics.RequestResult` is
*collected* once, where the raw log is written (standalone, or the master: a
worker sends each result as an ``llmload_result`` message and logs nothing
itself). Collecting appends it to the raw log, counts it in the live figures
(:class:`~llmload.loadgen.live.LiveBoard`) and logs it into Locust's stats: the
request row (``POST chat /v1/chat/completions``) with the true E2E as its
response time and the output tokens as its length, and one ``METRIC`` row per
catalogue metric marked ``locust_row`` (``chat TTFT``, ``chat TPOT``,
``chat dispatch lag``, in ms) plus ``chat SLO ...`` whose failures are the
requests that missed it. ``METRIC`` rows are logged straight into their
``StatsEntry``, so the Aggregated row counts real requests only. So the raw
log and Locust's stats agree by construction, however many workers come and go.

Tickets (:mod:`llmload.loadgen.budget`) number the requests for ``--requests``,
``--warmup`` and ``--rate``; a worker asks the master for one before each
request (``llmload_ticket``). When a worker disappears, the master records its
requests in flight as lost and returns their tickets, so the run still ends
by ``--requests``.
"""

from __future__ import annotations

import csv
import gc
import itertools
import json
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
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV, StatsError

from llmload.core.cost import cost_figures, cost_text
from llmload.core.metrics import METRICS, RequestMetrics, RequestResult, request_metrics
from llmload.core.rawlog import RawLogWriter
from llmload.core.records import DatasetError, PromptRecord, load_prompts
from llmload.core.transport import TransportError
from llmload.core.wire import WireError
from llmload.loadgen.budget import Budget, Ticket
from llmload.loadgen.live import LiveBoard, finite
from llmload.loadgen.options import LoadSettings, SettingsError, add_arguments, strict_parsing
from llmload.loadgen.schedule import Schedule

log = logging.getLogger("llmload")

METRIC_TYPE = "METRIC"
SLO_MISSED = "missed the SLO"
MSG_TICKET = "llmload_ticket"
MSG_TICKET_REPLY = "llmload_ticket_reply"
MSG_RESULT = "llmload_result"
TICKET_WAIT_S = 60.0
#: The dispatch lag (p99 over the last seconds) past which the load generator says it fell behind.
LAG_WARN_MS = 5.0
#: A run in which nothing answered for this long from its first request stops with one line.
NO_SERVER_S = 10.0
LOST = "lost"


class RequestFailure(Exception):
    """A failed request as Locust records it; ``repr`` is the bare message, as Locust prints errors with repr."""

    def __repr__(self) -> str:
        return str(self.args[0]) if self.args else "request failed"


def request_row_name(task: str, path: str) -> str:
    """Name of the request row of ``task`` (request type ``POST``)."""
    return f"{task} {path}"


def metric_row_name(task: str, title: str) -> str:
    """Name of a ``METRIC`` row: ``chat TTFT``."""
    return f"{task} {title}"


class LoadPlugin:
    """The state of one Locust environment: settings, prompts, model, tickets, live figures, raw log."""

    def __init__(self, environment):
        self.environment = environment
        self.settings = LoadSettings.from_options(environment.parsed_options)
        self.board = LiveBoard()
        self.raw_log: RawLogWriter | None = None
        self.budget: Budget | None = None
        self.completed = 0  # results that count toward --requests (warm-up included, lost ones not)
        self.finishing = False
        self.lag_warned = False
        self.no_server_said = False
        self.stop_signalled = False
        self._model = AsyncResult()
        self._model_lookup: gevent.Greenlet | None = None
        self._prompts: dict[Path, list[PromptRecord]] = {}
        self._cursors: dict[str, itertools.count] = {}
        self._pending: dict[str, AsyncResult] = {}
        self._monitor = None
        self._greenlets: list[gevent.Greenlet] = []
        self._registered = False
        self._first_result_at: float | None = None
        self._successes = 0

    # ------------------------------------------------------------------ roles

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

    def user_classes(self) -> list:
        return list(self.environment.user_classes or [])

    def tasks(self) -> list[str]:
        """The tasks of the selected user classes."""
        return sorted({c.task_name for c in self.user_classes() if getattr(c, "task_name", "")})

    def register_messages(self) -> None:
        if self._registered or self.runner is None:
            return
        if self.is_worker:
            self.runner.register_message(MSG_TICKET_REPLY, self._on_ticket_reply)
        elif self.is_master:
            self.runner.register_message(MSG_TICKET, self._on_ticket)
            self.runner.register_message(MSG_RESULT, self._on_result)
        self._registered = True

    def on_test_start(self) -> None:
        # Workers get the master's options just before test_start: read them again.
        self.settings = LoadSettings.from_options(self.environment.parsed_options)
        self.completed, self.finishing, self.lag_warned, self.no_server_said = 0, False, False, False
        self._first_result_at, self._successes = None, 0
        # SIGTERM and Ctrl-C: one orderly stop (Locust's own SIGTERM handler exits twice and prints a
        # SystemExit traceback; a KeyboardInterrupt lands in whichever user greenlet is running).
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        if self.is_worker:
            return
        self.board = LiveBoard()
        schedule = Schedule(self.settings.rate, self.settings.arrival_law, self.settings.burstiness,
                            self.settings.seed) if self.settings.open_loop else None
        self.budget = Budget(self.settings.requests, self.settings.warmup, schedule)
        path = self.settings.raw_log_path or self._web_ui_raw_log()
        if path is not None:
            if self.raw_log is not None:
                self.raw_log.close()
            self.raw_log = RawLogWriter(path)
        self.start_monitor()
        self._spawn(self._tick)

    def on_test_stop(self) -> None:
        for greenlet in self._greenlets:
            greenlet.kill(block=False)
        self._greenlets = []
        if self.is_worker:
            return
        if self.raw_log is not None:
            self.raw_log.flush()
        self.stop_monitor()
        self.write_summary()
        self._check_no_server(at_stop=True)

    def on_quit(self) -> None:
        if self.is_worker:
            return
        self.stop_monitor()
        if getattr(self.environment.parsed_options, "html_file", None):
            from llmload.loadgen.webui import write_html_extras  # flask: only for --html

            write_html_extras(self.environment, self)
        if self.settings.csv_prefix:
            stop_locust_csv_writer()
            self.write_final_csv()
        summary = self.board.total()
        path = self.raw_log.path if self.raw_log is not None else None
        if self.raw_log is not None:
            self.raw_log.close()
        if summary.requests:
            log.info("llmload: " + summary.line() + cost_text(cost_figures(self.settings.price_per_hour, summary))
                     + self._unreachable_text() + (f"; raw log {path}" if path else ""))
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
        """Once a second: flush the raw log, keep a point of history, watch for lost workers and lag."""
        while True:
            gevent.sleep(1.0)
            if self.raw_log is not None:
                self.raw_log.flush()
            self.board.snapshot(users=getattr(self.runner, "user_count", 0))
            if self.is_master:
                self._return_lost_tickets()
            self._warn_if_behind()
            self._check_no_server()

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
        """A ticket for one request, or None once ``--requests`` is used up (``scheduled``: see Budget.take)."""
        if not self.needs_tickets:
            return Ticket(-1)
        if not self.is_worker:
            return self.budget.take("", scheduled) if self.budget is not None else None
        ask = uuid.uuid4().hex
        answer = AsyncResult()
        self._pending[ask] = answer
        try:
            self.runner.send_message(MSG_TICKET, {"ask": ask, "scheduled": scheduled})
            data = answer.get(timeout=TICKET_WAIT_S)
            return Ticket(**data) if data else None
        except gevent.Timeout:
            log.warning(f"llmload: no answer from the master about the request budget in {TICKET_WAIT_S:.0f} s")
            return None
        finally:
            self._pending.pop(ask, None)

    def _on_ticket(self, environment, msg, **_kw) -> None:
        scheduled = msg.data.get("scheduled", True)
        ticket = self.budget.take(msg.node_id, scheduled) if self.budget is not None else None
        self.runner.send_message(MSG_TICKET_REPLY, {"ask": msg.data["ask"],
                                                    "ticket": ticket.to_dict() if ticket else None},
                                 client_id=msg.node_id)

    def _on_ticket_reply(self, environment, msg, **_kw) -> None:
        answer = self._pending.get(msg.data["ask"])
        if answer is not None:
            answer.set(msg.data["ticket"])

    def _return_lost_tickets(self) -> None:
        """Workers that went missing: record their requests in flight as lost and give their tickets back."""
        if self.budget is None:
            return
        clients = self.runner.clients
        for node in [n for n in self.budget.held if n]:
            worker = clients.get(node)
            if worker is not None and worker.state != STATE_MISSING:
                continue
            count = self.budget.lose(node)
            if not count:
                continue
            log.warning(f"llmload: worker {node} was lost with {count} request(s) in flight: recorded as lost, "
                        "their tickets returned to the other workers")
            for _ in range(count):
                self.collect(RequestResult(
                    request_id=uuid.uuid4().hex, task=",".join(self.tasks()) or "?", api=self.settings.api,
                    mode=self.settings.mode, start_time=time.time(), end_offset=0.0, success=False,
                    error=f"lost: worker {node} disappeared before its answer arrived", worker=node,
                    flags=[LOST]), node=None)

    # ------------------------------------------------------------------ results

    def report(self, result: RequestResult) -> None:
        """A user's result: sent to the master from a worker, collected here otherwise."""
        if self.is_worker:
            self.runner.send_message(MSG_RESULT, result.__dict__)
        else:
            self.collect(result, node="")

    def _on_result(self, environment, msg, **_kw) -> None:
        self.collect(RequestResult.from_dict(msg.data), node=msg.node_id)

    def collect(self, result: RequestResult, node: str | None) -> None:
        """Count one result everywhere (raw log, live figures, Locust's stats); stop once ``--requests`` are in.

        ``node`` is the worker whose ticket it used ('' standalone; None for a lost request, whose ticket was
        already returned).
        """
        metrics = request_metrics(result)
        if self.settings.slo is not None:
            result.slo_ok = self.settings.slo.met(result, metrics)
        if self.raw_log is not None:
            self.raw_log.write(result)
        self.board.add(result, metrics)
        if not result.warmup:
            self._log_stats(result, metrics)
        if result.success:
            self._successes += 1
        elif self._first_result_at is None:
            self._first_result_at = time.time()
        if node is None:
            return
        if self.budget is not None and self.needs_tickets:
            self.budget.done(node)
        self.completed += 1
        if self.settings.requests and self.completed >= self.settings.requests and not self.finishing:
            self.finishing = True
            gevent.spawn(self._finish, f"{self.completed} requests done (--requests {self.settings.requests})")

    def _log_stats(self, result: RequestResult, metrics: RequestMetrics) -> None:
        stats = self.environment.stats
        self.environment.events.request.fire(
            request_type="POST", name=request_row_name(result.task, self.settings.params.path),
            response_time=(metrics.e2e if result.success else result.end_offset) * 1000.0,
            response_length=metrics.output_tokens, exception=None if result.success else RequestFailure(result.error),
            context={}, start_time=result.start_time, url="", response=None)
        if not result.success:
            return
        for metric in METRICS:
            if metric.locust_row:
                value = metric.value(metrics)
                if value is not None:
                    stats.get(metric_row_name(result.task, metric.title), METRIC_TYPE).log(
                        value * metric.scale, metrics.output_tokens)
        if result.slo_ok is not None:
            entry = stats.get(metric_row_name(result.task, f"SLO {self.settings.slo.describe()}"), METRIC_TYPE)
            entry.log(metrics.e2e * 1000.0, metrics.output_tokens)
            if not result.slo_ok:
                # a failure of the row, and one line of Locust's error table (which sets the exit code),
                # not of the Aggregated row, which counts real requests only
                entry.log_error(None)
                key = StatsError.create_key(METRIC_TYPE, entry.name, SLO_MISSED)
                stats.errors.setdefault(key, StatsError(METRIC_TYPE, entry.name, SLO_MISSED)).occurred()

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
        late = self.budget.late if self.budget is not None else 0
        users = getattr(self.environment.parsed_options, "num_users", None)
        log.warning(f"llmload: warning: the load generator fell behind its schedule: dispatch lag p99 {lag:.1f} ms "
                    f"{where}; {late} request(s) were due while all {users} users (-u) were busy: raise -u, or "
                    "add workers if the client's CPU is saturated")

    def _unreachable_text(self) -> str:
        down = self.board.unreachable_so_far()
        return f"; the server was unreachable for {down:.1f} s" if down >= 0.05 else ""

    def _check_no_server(self, at_stop: bool = False) -> None:
        """One line saying what to do when the server refused every request; stop the run after NO_SERVER_S."""
        if self.no_server_said or self._successes or self._first_result_at is None:
            return
        if self.board.unreachable_so_far() <= 0:
            return  # failures of another kind: the server is there
        if not at_stop and time.time() - self._first_result_at < NO_SERVER_S:
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
        total = self.board.total()
        data = {"summary": {k: finite(v) if isinstance(v, float) else v for k, v in total.flat().items()},
                "per_task": {task: {k: finite(v) if isinstance(v, float) else v for k, v in s.flat().items()}
                             for task, s in self.board.summaries().items()},
                "line": total.line(), "exact": False, "unreachable_s": round(self.board.unreachable_so_far(), 3),
                "late_requests": self.budget.late if self.budget is not None else 0,
                "lag_warning": self.lag_warned, "cost": cost_figures(self.settings.price_per_hour, total),
                "settings": {"mode": self.settings.mode, "api": self.settings.api, "rate": self.settings.rate,
                             "arrival": self.settings.arrival_law if self.settings.open_loop else None,
                             "requests": self.settings.requests, "warmup": self.settings.warmup,
                             "slo": self.settings.slo.to_dict() if self.settings.slo else None,
                             "users": getattr(self.environment.parsed_options, "num_users", None)},
                "raw_log": str(self.raw_log.path) if self.raw_log is not None else None}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    def write_final_csv(self) -> None:
        """Rewrite Locust's ``*_stats.csv`` and ``*_failures.csv`` from the final statistics (one row per name)."""
        prefix = self.settings.csv_prefix
        writer = StatsCSV(self.environment, PERCENTILES_TO_REPORT)
        for suffix, write in (("_stats.csv", writer.requests_csv), ("_failures.csv", writer.failures_csv)):
            path = Path(prefix + suffix)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("w", newline="") as handle:
                write(csv.writer(handle))
            os.replace(tmp, path)

    # ------------------------------------------------------------------ resource monitor

    def start_monitor(self) -> None:
        if self.settings.monitor_pid is None or self._monitor is not None:
            return
        try:
            from monitors.sampler import start_monitor  # psutil and a subprocess: only with --monitor-pid
        except ImportError as exc:
            log.error(f"llmload: --monitor-pid given but the resource monitor is not available ({exc}); "
                      "running without it")
            return
        kwargs = {"metrics_url": self.settings.metrics_url} if self.settings.metrics_url else {}
        try:
            self._monitor = start_monitor(str(self.settings.monitor_path),
                                          server_pid=self.settings.monitor_pid or None,
                                          interval=self.settings.monitor_interval, **kwargs)
        except Exception as exc:  # the load test goes on without resource figures
            log.error(f"llmload: cannot start the resource monitor: {type(exc).__name__}: {exc}")

    def stop_monitor(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.stop()


def stop_locust_csv_writer() -> None:
    """Stop Locust's periodic CSV writer greenlet (a workaround for Locust 2.47).

    Locust closes its CSV files at exit but leaves the writer greenlet running;
    gevent's exit hook yields once more, and when the writer's 1 s timer is due
    it writes to the closed files and prints a ValueError traceback. The final
    CSVs are written by :meth:`LoadPlugin.write_final_csv` instead, so the
    writer is stopped here, at ``quit``, while its files are still open.
    """
    for obj in gc.get_objects():
        if isinstance(obj, gevent.Greenlet) and getattr(getattr(obj, "_run", None), "__name__", "") == "stats_writer":
            obj.kill(block=True, timeout=1)


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


@locust.events.quit.add_listener
def _on_quit(**_kw) -> None:
    for plugin in list(_PLUGINS.values()):
        plugin.on_quit()
