"""The Locust integration: options, stats rows, the raw log, ``--requests``, distributed mode, the monitor.

Importing this module registers its listeners on ``locust.events`` (the
locustfiles import it through :mod:`llmload.loadgen.user`). One
:class:`LoadPlugin` per Locust environment holds the run's state.

How results reach Locust's statistics
-------------------------------------
* The request row (``POST  chat /v1/chat/completions``): one ``request`` event
  per request, fired here with ``response_time`` = the true E2E from
  :func:`llmload.core.metrics.request_metrics` (Locust itself would stop the clock at
  the response headers when streaming) and ``response_length`` = output tokens.
  Failures carry a :class:`RequestFailure` whose text is the one-line error.
* The ``METRIC`` rows (``chat TTFT``, ``chat TPOT``, in ms): logged straight into
  their :class:`locust.stats.StatsEntry` with ``environment.stats.get(name,
  "METRIC").log(...)``. ``RequestStats.log_request`` (the ``request`` event's
  path) would also add every sample to the Aggregated total, doubling or tripling
  the request count and RPS that Locust's charts plot; ``StatsEntry.log`` does
  not. The rows still travel to the master with the workers' stats (Locust sends
  entries and the total separately), and they appear in the console table,
  ``*_stats.csv``, the HTML report and the web UI's statistics tab, while the
  Aggregated row counts real requests only.

The raw log and ``--requests``
------------------------------
Every :class:`~llmload.core.metrics.RequestResult` goes to the process that writes
the raw log: kept in memory when standalone, sent to the master as a custom
message (``llmload_result``) by a worker. ``--requests N`` is a budget of N
tickets held by that same process; a worker asks the master for a ticket
before each request (``llmload_ticket``), so the total is exactly N however the
users are spread over workers. When the N-th result arrives the run stops
(quits when headless). The raw log, ``<csv prefix>_requests.jsonl`` or
``--raw-log``, is written at ``test_stop`` and rewritten at ``quit``, when the
workers' final reports have arrived; Locust's ``*_stats.csv`` and
``*_failures.csv`` are rewritten then too, since Locust's own writer only
refreshes them once a second and never after the last samples.
"""

from __future__ import annotations

import csv
import gc
import itertools
import logging
import os
import random
import uuid
import weakref
from dataclasses import asdict
from pathlib import Path

import gevent
from gevent.event import AsyncResult
from gevent.lock import Semaphore

import locust
from locust.runners import MasterRunner, WorkerRunner
from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

from llmload.core.metrics import RequestResult, request_metrics, summarize, write_results
from llmload.core.records import DatasetError, PromptRecord, load_prompts
from llmload.loadgen.options import LoadSettings, SettingsError, add_arguments
from llmload.core.transport import TransportError
from llmload.core.wire import WireError

log = logging.getLogger("llmload")

METRIC_TYPE = "METRIC"
MSG_TICKET = "llmload_ticket"
MSG_TICKET_REPLY = "llmload_ticket_reply"
MSG_RESULT = "llmload_result"
TICKET_WAIT_S = 60.0


class RequestFailure(Exception):
    """A failed request as Locust records it; ``repr`` is the bare message, as Locust prints errors with repr."""

    def __repr__(self) -> str:
        return str(self.args[0]) if self.args else "request failed"


def metric_row_names(task: str) -> tuple[str, str]:
    """Names of the TTFT and TPOT rows of ``task`` (request type :data:`METRIC_TYPE`)."""
    return f"{task} TTFT", f"{task} TPOT"


def request_row_name(task: str, path: str) -> str:
    """Name of the request row of ``task`` (request type ``POST``)."""
    return f"{task} {path}"


class LoadPlugin:
    """The state of one Locust environment: settings, prompts, model, budget and collected results."""

    def __init__(self, environment):
        self.environment = environment
        self.settings = LoadSettings.from_options(environment.parsed_options)
        self.results: list[RequestResult] = []  # master / standalone: this test's results
        self.issued = 0
        self.finishing = False
        self.model: str | None = None
        self._model_lock = Semaphore()
        self._prompts: dict[Path, list[PromptRecord]] = {}
        self._cursors: dict[str, itertools.count] = {}
        self._pending: dict[str, AsyncResult] = {}
        self._monitor = None
        self._registered = False

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
        """Check the options, fail fast on a missing prompt file, register messages and the web UI tab."""
        self.settings.check()
        if not self.is_worker:  # a worker's options (and so its --dataset) arrive from the master later
            for task in self.tasks():
                self.prompts(task)
        self.register_messages()
        if getattr(self.environment, "web_ui", None) is not None:
            from llmload.loadgen.webui import install

            install(self.environment, self)

    def tasks(self) -> list[str]:
        """The tasks of the selected user classes."""
        classes = self.environment.user_classes or []
        return sorted({c.task_name for c in classes if getattr(c, "task_name", "")})

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
        self.results, self.issued, self.finishing, self.model = [], 0, False, None
        if not self.is_worker:
            self.start_monitor()

    def on_test_stop(self) -> None:
        if not self.is_worker:
            self.write_raw_log()
            self.stop_monitor()

    def on_quit(self) -> None:
        if self.is_worker:
            return
        self.stop_monitor()
        path = self.write_raw_log()
        if self.settings.csv_prefix:
            stop_locust_csv_writer()
            self.write_final_csv()
        if self.results:
            s = summarize(self.results)
            ttft = f", TTFT p50 {s.get('ttft', 'p50') * 1000:.1f} ms" if s.get("ttft", "p50") is not None else ""
            tpot = f", TPOT mean {s.get('tpot', 'mean') * 1000:.2f} ms" if s.get("tpot", "mean") is not None else ""
            e2e = f", E2E p50 {s.get('e2e', 'p50') * 1000:.1f} ms" if s.get("e2e", "p50") is not None else ""
            log.info(f"llmload: {s.requests} requests, {s.failures} failed{e2e}{ttft}{tpot}, "
                     f"{s.request_throughput:.2f} req/s, {s.output_token_throughput:.1f} output tok/s"
                     + (f"; raw log {path}" if path else ""))

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

    def resolve_model(self, client) -> tuple[str, str]:
        """``(model, "")`` from ``--model`` or the server's first listed model; ``("", error)`` if unavailable."""
        if self.settings.model:
            return self.settings.model, ""
        with self._model_lock:
            if self.model is None:
                try:
                    self.model = client.list_first_model()
                    log.info(f"llmload: using model {self.model!r} (the first listed at /v1/models)")
                except (TransportError, WireError) as exc:
                    return "", f"cannot find the model to use: {exc} (pass --model to skip the lookup)"
            return self.model, ""

    # ------------------------------------------------------------------ the --requests budget

    def acquire(self) -> bool:
        """One request may be sent (always True without ``--requests``)."""
        if not self.settings.requests:
            return True
        if not self.is_worker:
            return self._take()
        ask = uuid.uuid4().hex
        answer = AsyncResult()
        self._pending[ask] = answer
        try:
            self.runner.send_message(MSG_TICKET, {"ask": ask})
            return bool(answer.get(timeout=TICKET_WAIT_S))
        except gevent.Timeout:
            log.warning(f"llmload: no answer from the master about the request budget in {TICKET_WAIT_S:.0f} s")
            return False
        finally:
            self._pending.pop(ask, None)

    def _take(self) -> bool:
        if self.issued >= self.settings.requests:
            return False
        self.issued += 1
        return True

    def _on_ticket(self, environment, msg, **_kw) -> None:
        self.runner.send_message(MSG_TICKET_REPLY, {"ask": msg.data["ask"], "granted": self._take()},
                                 client_id=msg.node_id)

    def _on_ticket_reply(self, environment, msg, **_kw) -> None:
        answer = self._pending.get(msg.data["ask"])
        if answer is not None:
            answer.set(msg.data["granted"])

    # ------------------------------------------------------------------ results

    def report(self, result: RequestResult, context: dict | None = None, url: str = "") -> None:
        """Record one result: Locust's request row and METRIC rows here, the raw record where the log is kept."""
        metrics = request_metrics(result)
        params = self.settings.params
        self.environment.events.request.fire(
            request_type="POST", name=request_row_name(result.task, params.path),
            response_time=(metrics.e2e if result.success else result.end_offset) * 1000.0,
            response_length=metrics.output_tokens, exception=None if result.success else RequestFailure(result.error),
            context=context or {}, start_time=result.start_time, url=url, response=None)
        if result.success:
            ttft_row, tpot_row = metric_row_names(result.task)
            if metrics.ttft is not None:
                self.environment.stats.get(ttft_row, METRIC_TYPE).log(metrics.ttft * 1000.0, metrics.output_tokens)
            if metrics.tpot is not None:
                self.environment.stats.get(tpot_row, METRIC_TYPE).log(metrics.tpot * 1000.0, metrics.output_tokens)
        if self.is_worker:
            self.runner.send_message(MSG_RESULT, asdict(result))
        else:
            self.collect(result)

    def _on_result(self, environment, msg, **_kw) -> None:
        self.collect(RequestResult.from_dict(msg.data))

    def collect(self, result: RequestResult) -> None:
        """Keep a result for the raw log; stop the run once ``--requests`` results are in."""
        self.results.append(result)
        if self.settings.requests and len(self.results) >= self.settings.requests and not self.finishing:
            self.finishing = True
            gevent.spawn(self._finish)

    def _finish(self) -> None:
        options = self.environment.parsed_options
        log.info(f"llmload: {len(self.results)} requests done (--requests {self.settings.requests}), stopping")
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

    # ------------------------------------------------------------------ files

    def write_raw_log(self) -> Path | None:
        """Write every result of the test to the raw log (atomically); its path, or None when not asked for."""
        path = self.settings.raw_log_path
        if path is None:
            return None
        write_results(path, self.results)
        return path

    def write_final_csv(self) -> None:
        """Rewrite Locust's ``*_stats.csv`` and ``*_failures.csv`` from the final statistics."""
        prefix = self.settings.csv_prefix
        if not prefix:
            return
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
        path = self.settings.monitor_path
        try:
            from monitors.sampler import start_monitor
        except ImportError as exc:
            log.error(f"llmload: --monitor-pid given but the resource monitor is not available ({exc}); "
                      "running without it")
            return
        try:
            self._monitor = start_monitor(str(path), server_pid=self.settings.monitor_pid or None,
                                          interval=self.settings.monitor_interval)
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


@locust.events.init.add_listener
def _on_init(environment, **_kw) -> None:
    try:
        plugin_for(environment).on_init()
    except (SettingsError, DatasetError) as exc:
        # one line, no traceback: a user error (SystemExit passes through Locust's event hook)
        raise SystemExit(f"error: {exc}") from None


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
