"""A distributed run: who may join, what a worker reports, and how the master merges it (no Locust in here).

Each worker counts its own results (:mod:`llmload.loadgen.sink`) and sends the
master, in Locust's own worker report (``report_to_master``, every 3 s, and once
more when it stops), an ``llmload`` part beside Locust's stats:

* ``fp``: its :func:`fingerprint` (code version, the suite's options it was
  started with, its tasks), checked once by the master (:func:`mismatch`);
* ``run``: the run it belongs to (the master's, sent with Locust's spawn message);
* ``cut``: the moment it was cut, and what it counted since the last one: the
  live board's delta, its shard's new bytes (whole JSONL lines), and its
  counters (results done, requests in flight, tickets taken);
* ``final``: it stopped and has nothing more to send.

The master keeps one :class:`Member` per worker in a :class:`Cluster`: merges
each part into its board, appends the shard bytes to the run's raw log in
offset order, and when a worker is lost (:meth:`Cluster.retire`) reads the rest
of its shard from disk where it can, records its requests in flight as lost,
and returns its outstanding tickets. Tickets travel in their own messages
(:data:`MSG_ASK`, :data:`MSG_GRANT`), one per block.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path

from llmload.core.metrics import SLO, RequestResult
from llmload.core.rawlog import read_tail
from llmload.loadgen.budget import Budget
from llmload.loadgen.live import LiveBoard
from llmload.loadgen.sink import ResultSink

REPORT_KEY = "llmload"  # the suite's part of Locust's worker report
MSG_ASK = "llmload_ask"  # worker -> master: {"run", "count", "scheduled", "users", "shard"}
MSG_GRANT = "llmload_grant"  # master -> worker: a Block, and its run
MSG_MORE = "llmload_more"  # master -> workers: the budget has tickets again (a lost worker's)
MSG_STOP = "llmload_stop"  # master -> worker: stop the users and send the final report now
MSG_MERGED = "llmload_merged"  # master -> worker: the shard is in the run's raw log: delete it
MSG_REFUSED = "llmload_refused"  # master -> worker: {"reason"}: it may not join
MSG_FAILED = "llmload_failed"  # worker -> master: {"reason"}: it stops
LOST = "lost"


def code_version(root: Path = Path(__file__).resolve().parents[1]) -> str:
    """A short hash of the suite's code (every ``llmload/**/*.py``): two processes agree on it only when their
    record format, metrics and protocol are the same."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def option_texts(settings) -> dict[str, str]:
    """The suite's options that differ from their defaults, by flag, as text (a secret as ``<secret>``)."""
    texts = {}
    for f in fields(settings):
        flag = f.metadata.get("flag")
        value = getattr(settings, f.name)
        if not flag or value == f.default:
            continue
        if f.metadata.get("is_secret"):
            texts[flag] = "<secret " + hashlib.sha256(str(value).encode()).hexdigest()[:8] + ">"
        else:
            texts[flag] = value.describe() if isinstance(value, SLO) else str(value)
    return texts


def fingerprint(settings, tasks: list[str], code: str | None = None) -> dict:
    """What a worker says of itself when it joins: its code version, the options it was started with, its tasks."""
    return {"code": code or code_version(), "options": option_texts(settings), "tasks": sorted(tasks)}


def mismatch(master: dict, worker: dict | None) -> str | None:
    """Why a worker may not join a master (both :func:`fingerprint`), in a few words; None when it may."""
    if not isinstance(worker, dict) or "code" not in worker:
        return "it sent no llmload fingerprint (another version of llmload, or a locustfile without it)"
    if worker["code"] != master["code"]:
        return f"it runs llmload code {worker['code']}, the master {master['code']}: run the same version on both"
    for flag, value in sorted(worker.get("options", {}).items()):
        mine = master["options"].get(flag)
        if value != mine:
            return (f"it was started with {flag} {value}, the master with {mine or 'the default'}: give the suite's "
                    "options to the master only (the workers get them from it)")
    missing = sorted(set(master["tasks"]) - set(worker.get("tasks", [])))
    if missing:
        return f"it has no user class for task(s) {', '.join(missing)}: start it with the master's locustfile"
    return None


def shard_folder(raw_log: Path) -> Path:
    """Where the workers of a run whose raw log is ``raw_log`` write their shards (relative paths: from each
    worker's own working folder)."""
    name = raw_log.name[: -len(".jsonl")] if raw_log.name.endswith(".jsonl") else raw_log.name
    return raw_log.with_name(name + ".shards")


def shard_path(folder: Path, index: int, node: str) -> Path:
    return folder / f"w{index}-{node}.jsonl"


def lost_result(node: str, tasks: list[str], api: str, mode: str) -> RequestResult:
    """The record of one request a lost worker had in flight."""
    return RequestResult(request_id=uuid.uuid4().hex, task=",".join(tasks) or "?", api=api, mode=mode,
                         start_time=time.time(), end_offset=0.0, success=False,
                         error=f"lost: worker {node} disappeared before its answer arrived", worker=node,
                         flags=[LOST])


@dataclass
class Member:
    """The master's view of one worker in the current run."""

    node: str
    last_cut: float = 0.0
    done: int = 0  # results on record (reported, and read back from its shard)
    in_flight: int | None = None  # at its last report (None: no report yet)
    users: int = 0  # at its last report or ask
    taken: int = 0
    shard: str | None = None  # its shard's path, as the worker sees it
    offset: int = 0  # bytes of its shard in the run's raw log
    lines: int = 0
    chunks: dict = field(default_factory=dict)  # offset -> (data, lines) that arrived ahead of their turn
    final: bool = False  # sent its last report
    gone: str = ""  # why it left early (lost, failed), or ''

    @property
    def active(self) -> bool:
        return not self.final and not self.gone


@dataclass
class Retired:
    """What :meth:`Cluster.retire` did: results read back from the shard, requests recorded as lost, tickets
    returned, and the shard's state in a few words."""

    recovered: int
    lost: int
    returned: int
    shard_note: str


class Cluster:
    """The master's workers in one run: their reports merged into ``sink`` (board, raw log, Locust's rows)."""

    def __init__(self, run: str, sink: ResultSink, budget: Budget | None, started: float | None = None):
        self.run, self.sink, self.budget = run, sink, budget
        self.members: dict[str, Member] = {}
        self.started = time.time() if started is None else started

    @property
    def board(self) -> LiveBoard:
        return self.sink.board

    @property
    def completed(self) -> int:
        """Results on record that answered a ticket (warm-up included, lost ones not)."""
        return sum(m.done for m in self.members.values())

    def member(self, node: str) -> Member:
        member = self.members.get(node)
        if member is None:
            member = self.members[node] = Member(node)
        return member

    def asked(self, node: str, data: dict) -> Member:
        """A worker asked for tickets: note its users and its shard (it may die before its first report)."""
        member = self.member(node)
        member.users = data.get("users", member.users)
        member.shard = member.shard or data.get("shard")
        return member

    def report(self, node: str, part: dict) -> Member | None:
        """Merge one worker report's ``llmload`` part (None: not of this run, or from a worker already gone)."""
        if part.get("run") != self.run:
            return None
        member = self.member(node)
        if member.gone:
            return None
        cut = part.get("cut")
        if cut:
            latest = cut["at"] >= member.last_cut  # two reports may cross: gauges keep the newer one's values
            member.last_cut = max(member.last_cut, cut["at"])
            self.board.merge(LiveBoard.from_wire(cut["board"]), node, latest)
            self._append(member, cut["shard"])
            if self.budget is not None and cut["done"] > member.done:
                self.budget.done(node, cut["done"] - member.done)
            member.done = max(member.done, cut["done"])
            if latest:
                member.in_flight, member.taken, member.users = cut["in_flight"], cut["taken"], cut["users"]
        member.final = member.final or bool(part.get("final"))
        return member

    def _append(self, member: Member, shard: dict | None) -> None:
        """Append a shard chunk to the run's raw log in offset order (chunks may arrive out of order)."""
        if shard is None:
            return
        member.shard = shard["path"]
        if not shard["data"] or self.sink.raw_log is None:
            return
        member.chunks[shard["offset"]] = (shard["data"], shard["lines"])
        while member.offset in member.chunks:
            data, lines = member.chunks.pop(member.offset)
            self.sink.raw_log.write_bytes(data, lines)
            member.offset += len(data)
            member.lines += lines

    def complete_until(self, nodes: list[str]) -> float:
        """The moment up to which the board holds every result of ``nodes`` (the workers running users)."""
        cuts = [self.members[n].last_cut if n in self.members else self.started for n in nodes
                if n not in self.members or self.members[n].active]
        return max(min(cuts), self.started) if cuts else time.time()

    def retire(self, node: str, why: str, api: str, mode: str, tasks: list[str]) -> Retired:
        """Worker ``node`` left the run early (``why``: lost, failed, left): merge what its shard holds beyond its
        last report (where the master can read it, when that was not its final one), record the requests it had
        in flight at its last report (before any report: one per user) as lost, and return its outstanding
        tickets to the budget."""
        member = self.member(node)
        member.gone = why
        recovered, note = 0, ""
        if member.shard and not member.final and self.sink.raw_log is not None:
            member.chunks.clear()
            try:
                data, results = read_tail(member.shard, member.offset)
            except (OSError, ValueError) as exc:
                note = f"its shard {member.shard} is not readable from here ({exc}): what it measured after its " \
                       "last report is only there"
            else:
                self.sink.raw_log.write_bytes(data, len(results))
                for result in results:
                    self.sink.record(result)
                recovered = len(results)
                member.offset += len(data)
                member.lines += recovered
                member.done += recovered
                if self.budget is not None:
                    self.budget.done(node, recovered)
                if recovered:
                    note = f"{recovered} result(s) after its last report read from its shard {member.shard}"
        in_flight = member.users if member.in_flight is None else member.in_flight
        outstanding = self.budget.held[node] if self.budget is not None else in_flight
        lost = min(in_flight, outstanding)
        for _ in range(lost):
            self.sink.collect(lost_result(node, tasks, api, mode), counts=False)
        returned = self.budget.lose(node) if self.budget is not None else 0
        return Retired(recovered, lost, returned, note)
