"""The results sink: where each :class:`~llmload.core.metrics.RequestResult` is counted, once, where it was measured.

A :class:`ResultSink` (one per process that sends requests: standalone, or each
worker of a distributed run) takes every result of its users and, in one step
that never yields to another greenlet:

1. judges it against ``--slo`` (``slo_ok``);
2. appends it to the raw log, or on a worker to its shard (its own raw log,
   same guarantees: :class:`~llmload.core.rawlog.RawLogWriter`);
3. counts it in the live board (:class:`~llmload.loadgen.live.LiveBoard`);
4. hands it to ``rows`` (the plugin's: Locust's stats rows), warm-up excluded.

On a worker, :meth:`ResultSink.cut` takes what was counted since the last cut,
all at one moment: the board's delta, the shard's new bytes and the counters.
Locust's own stats are cut in the same report (``report_to_master``), so the
master's raw log, its stats and its live figures agree by construction. The
master uses a sink too, for what only it records: a lost worker's requests in
flight, and what it reads back from that worker's shard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from llmload.core.metrics import SLO, RequestMetrics, RequestResult, request_metrics
from llmload.core.rawlog import RawLogWriter
from llmload.loadgen.live import LiveBoard


@dataclass
class Cut:
    """What a worker counted between two reports (:meth:`ResultSink.cut`), as its report carries it."""

    at: float  # epoch seconds it was cut
    board: dict  # LiveBoard.to_wire() of the delta
    shard: dict | None  # {"path", "offset", "data", "lines"} of the shard's new bytes
    done: int  # results so far (this run), warm-up included, lost ones not
    in_flight: int  # tickets taken without a result yet
    taken: int
    users: int

    def to_wire(self) -> dict:
        return {"at": self.at, "board": self.board, "shard": self.shard, "done": self.done, "in_flight": self.in_flight,
                "taken": self.taken, "users": self.users}


class ResultSink:
    """Counts results into a board, a raw log (or shard) and Locust's rows; cuts reports on a worker."""

    def __init__(self, slo: SLO | None, raw_log: RawLogWriter | None,
                 rows: Callable[[RequestResult, RequestMetrics], None] | None = None, delta: bool = False,
                 histograms: bool = False):
        self.slo = slo
        self.raw_log = raw_log
        self.rows = rows
        self.delta = delta  # a worker: the board holds what was counted since the last cut
        self.board = LiveBoard(histograms=histograms)
        self.done = 0
        self.in_flight = 0

    def started(self, intended_start: float | None = None) -> None:
        """A user took a ticket: one more request in flight until its result is collected; a ticket already due
        (open loop) means every user was busy when it fell due."""
        self.in_flight += 1
        if intended_start is not None and intended_start < time.time():
            self.board.counts.late += 1

    def abandoned(self) -> None:
        """A ticket taken whose request was never sent."""
        self.in_flight = max(self.in_flight - 1, 0)

    def collect(self, result: RequestResult, counts: bool = True) -> RequestMetrics:
        """Count one result everywhere (``counts``: it answers one of this process's tickets).

        OSError from the raw log propagates, with nothing of this result counted.
        """
        metrics = request_metrics(result)
        if self.slo is not None:
            result.slo_ok = self.slo.met(result, metrics)
        if self.raw_log is not None:
            self.raw_log.write(result)
        self.record(result, metrics)
        if counts:
            self.done += 1
            self.in_flight = max(self.in_flight - 1, 0)
        return metrics

    def record(self, result: RequestResult, metrics: RequestMetrics | None = None) -> None:
        """Count a result already in the raw log (judged, and written) into the board and Locust's rows."""
        metrics = metrics or request_metrics(result)
        self.board.add(result, metrics)
        if self.rows is not None and not result.warmup:
            self.rows(result, metrics)

    def cut(self, taken: int, users: int) -> Cut:
        """What was counted since the last cut (the board's delta, the shard's new bytes), and the counters."""
        board, at = self.board, time.time()
        wire = board.to_wire()
        if self.delta:
            self.board = LiveBoard(histograms=board.keeps_histograms)
            self.board.reach[""] = board.reach[""]  # the gauges go on
            if "" in board.clock:
                self.board.clock[""] = board.clock[""]
        shard = None
        if self.raw_log is not None and self.raw_log.keep:
            offset, data, lines = self.raw_log.take()
            shard = {"path": str(self.raw_log.path.resolve()), "offset": offset, "data": data, "lines": lines}
        return Cut(at, wire, shard, self.done, self.in_flight, taken, users)
