"""A distributed run's worker side (see :mod:`llmload.loadgen.cluster` for the protocol).

A worker writes its own raw-log shard, asks the master for tickets in blocks,
and puts its part (its fingerprint, its run, what it counted since the last
report) into each of Locust's worker reports. It reports at once when it has
nothing left to do, and sends its last report when its users stop or when the
master asks for it (:data:`~llmload.loadgen.cluster.MSG_STOP`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from gevent.event import AsyncResult

from llmload.core import cliargs
from llmload.core.rawlog import RawLogWriter
from llmload.loadgen.budget import Block
from llmload.loadgen.cluster import MSG_ASK, MSG_FAILED, MSG_GRANT, MSG_MERGED, MSG_MORE, MSG_REFUSED, MSG_STOP, \
    shard_path
from llmload.loadgen.sink import ResultSink

log = logging.getLogger("llmload")
#: The attribute of Locust's options that carries the run (its id, the shard folder) to the workers.
RUN_OPTION = "llmload_run"


class WorkerRole:
    """One worker's state in the current run: its id, its shard, what it still owes the master."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.run = ""
        self.final_sent = False
        self.drained = False
        self.returned = 0  # tickets given back since the last report
        self.arrival = AsyncResult()  # set when a block arrives
        self._final_for: str | None = None

    @property
    def runner(self):
        return self.plugin.runner

    def register(self) -> None:
        for kind, handler in ((MSG_GRANT, self.on_grant), (MSG_MORE, self.on_more), (MSG_STOP, self.on_stop),
                              (MSG_MERGED, self.on_merged), (MSG_REFUSED, self.on_refused)):
            self.runner.register_message(kind, handler)

    def start(self, settings, rows) -> ResultSink:
        """This run's id and shard, from the master's options; the sink that counts into them."""
        run = getattr(self.plugin.environment.parsed_options, RUN_OPTION, None) or {}
        self.run, self.final_sent, self.drained, self.returned = run.get("id", ""), False, False, 0
        sink = ResultSink(settings.slo, None, rows, delta=True, histograms=settings.prometheus_port is not None)
        if run.get("shards"):
            path = shard_path(Path(run["shards"]), self.runner.worker_index, self.runner.client_id)
            try:
                sink.raw_log = RawLogWriter(path, keep=True)
            except OSError as exc:
                self.plugin.fail_raw_log(path, exc, "raw-log shard")
        return sink

    # ------------------------------------------------------------------ tickets

    def ask(self, count: int, scheduled: bool, users: int) -> None:
        self.plugin.pool.asked(scheduled)
        raw = self.plugin.raw_log
        self.runner.send_message(MSG_ASK, {"run": self.run, "count": count, "scheduled": scheduled, "users": users,
                                           "shard": str(raw.path.resolve()) if raw is not None else None})

    def on_grant(self, environment, msg, **_kw) -> None:
        if msg.data.get("run") != self.run:
            return
        self.plugin.pool.add(Block.from_wire(msg.data))
        arrival, self.arrival = self.arrival, AsyncResult()
        arrival.set(True)
        self.report_if_drained()

    def on_more(self, environment, msg, **_kw) -> None:
        if msg.data.get("run") == self.run:
            self.plugin.pool.exhausted = False
            self.drained = False

    def give_back_if_idle(self) -> None:
        """Its users are all gone (a load shape stepping down): return the tickets in hand with the next report."""
        if getattr(self.runner, "user_count", 0) == 0 and self.plugin.pool.tickets:
            self.returned += self.plugin.pool.give_back()

    # ------------------------------------------------------------------ reports

    def part(self) -> dict:
        """The suite's part of this worker's Locust report (see :mod:`llmload.loadgen.cluster`)."""
        part: dict = {"fp": self.plugin.fingerprint, "run": self._final_for or self.run}
        if self.run and part["run"] == self.run and not (self.final_sent and self._final_for is None):
            cut = self.plugin.sink.cut(self.plugin.pool.taken, getattr(self.runner, "user_count", 0))
            part["cut"] = cut.to_wire()
            if self.returned:
                part["returned"], self.returned = self.returned, 0
        if self._final_for is not None:
            part["final"] = True
        return part

    def send_report(self) -> None:
        """A Locust worker report now (Locust's stats and the suite's part, cut at one moment)."""
        data: dict = {}
        self.plugin.environment.events.report_to_master.fire(client_id=self.runner.client_id, data=data)
        self.runner.send_message("stats", data)

    def report_if_drained(self) -> None:
        """Nothing left to do (budget used up, nothing in flight): report at once, so that the master can end the
        run by ``--requests`` without waiting for the next report."""
        pool, sink = self.plugin.pool, self.plugin.sink
        if pool.exhausted and not pool.tickets and not sink.in_flight and not self.drained:
            self.drained = True
            self.send_report()

    def send_final(self, run: str) -> None:
        """The last report of ``run`` (everything counted, the shard closed); for another run, just 'final'."""
        if run == self.run:
            if self.final_sent:
                return
            self.final_sent = True
            raw = self.plugin.raw_log
            if raw is not None and not raw.closed:
                try:
                    raw.close()
                except OSError as exc:  # its bytes go in the report anyway
                    log.error(f"llmload: cannot flush the raw-log shard {raw.path}: {exc}")
        self._final_for = run
        try:
            self.send_report()
        finally:
            self._final_for = None

    # ------------------------------------------------------------------ the master's word

    def on_stop(self, environment, msg, **_kw) -> None:
        """The master is ending the run: stop the users (their test_stop sends the last report), or just report."""
        run = msg.data.get("run", "")
        if run == self.run and not self.final_sent:
            self.runner.stop()
        self.send_final(run)

    def on_merged(self, environment, msg, **_kw) -> None:
        """The master holds this worker's whole shard: delete it (and its folder, once empty)."""
        raw = self.plugin.raw_log
        if msg.data.get("run") != self.run or raw is None or msg.data.get("offset") != raw.size:
            return
        raw.close()
        try:
            raw.path.unlink()
            raw.path.parent.rmdir()
        except OSError:
            pass  # another worker's shard is still there, or it is already gone

    def on_refused(self, environment, msg, **_kw) -> None:
        self.plugin.environment.process_exit_code = cliargs.print_error(f"the master refused this worker: "
                                                                f"{msg.data.get('reason')}")
        self.plugin.failed = "refused"

    def stop_failed(self, reason: str) -> None:
        """This worker cannot go on: its last report (what it measured), then why, to the master."""
        self.runner.stop()
        self.send_final(self.run)
        self.runner.send_message(MSG_FAILED, {"run": self.run, "reason": reason})
