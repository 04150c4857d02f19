"""A distributed run's master side (see :mod:`llmload.loadgen.cluster` for the protocol).

The master checks each worker once (its first report carries its fingerprint)
and refuses a mismatched one in one line; merges every report of the current
run into its :class:`~llmload.loadgen.cluster.Cluster`; grants tickets in
blocks; retires a worker that goes missing (or says it failed); and, when the
run stops, asks every worker still there for its last report and waits for it
(Locust's own ``quit`` waits only 0.5 s for the workers' last stats, Locust
issue 1426). It never sees a result one by one, except those it records itself.
"""

from __future__ import annotations

import logging
import time
import uuid

import gevent
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING
from locust.stats import StatsEntry

from llmload.loadgen.budget import Block
from llmload.loadgen.cluster import (MSG_ASK, MSG_FAILED, MSG_GRANT, MSG_MERGED, MSG_MORE, MSG_REFUSED, MSG_STOP,
                                     REPORT_KEY, Cluster, fingerprint, mismatch, shard_folder)
from llmload.loadgen.worker import RUN_OPTION

log = logging.getLogger("llmload")
#: Seconds the master waits, when a run stops, for every worker's last report.
FINAL_WAIT_S = 15.0


class MasterRole:
    """The master's workers: who may join, the current run's cluster, tickets, lost and failed workers."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.cluster: Cluster | None = None
        self.verified: set[str] = set()
        self.refused: set[str] = set()
        self.told_exhausted = False  # a worker heard the budget was used up

    @property
    def runner(self):
        return self.plugin.runner

    @property
    def run(self) -> str:
        return self.cluster.run if self.cluster is not None else ""

    def register(self) -> None:
        self.runner.register_message(MSG_ASK, self.on_ask)
        self.runner.register_message(MSG_FAILED, self.on_failed)

    def start(self, sink, budget, raw_log) -> None:
        """A new run: its id and shard folder go to the workers with Locust's spawn message (its options)."""
        self.cluster = Cluster(uuid.uuid4().hex[:12], sink, budget)
        self.told_exhausted = False
        folder = shard_folder(raw_log) if raw_log is not None else None
        setattr(self.plugin.environment.parsed_options, RUN_OPTION,
                {"id": self.run, "shards": str(folder) if folder else None})
        sink.board.complete_until = self.cluster.started

    # ------------------------------------------------------------------ reports

    def on_worker_report(self, node: str, data: dict) -> None:
        """Check a worker once, then merge the suite's part of each of its reports of this run."""
        part = data.get(REPORT_KEY)
        if node in self.refused:
            drop_locust_part(data, self.plugin.environment)
            return
        if node not in self.verified:
            plugin = self.plugin
            reason = mismatch(fingerprint(plugin.settings, plugin.tasks(), plugin.fingerprint["code"]),
                              part.get("fp") if isinstance(part, dict) else None)
            if reason:
                self.refuse(node, reason)
                drop_locust_part(data, plugin.environment)
                return
            self.verified.add(node)
        if self.cluster is None or not isinstance(part, dict) or part.get("run") != self.run:
            return
        member = self.cluster.members.get(node)
        if member is not None and member.gone:
            drop_locust_part(data, self.plugin.environment)  # what it measured after it was retired stays out
            return
        member = self.cluster.report(node, part)
        if member is None:
            return
        budget = self.cluster.budget
        if part.get("returned") and budget is not None:
            budget.give_back(node, part["returned"])
            self.tell_if_more()
        if part.get("final") and member.shard:
            if self.plugin.raw_log is not None:
                self.plugin.raw_log.flush()
            self.runner.send_message(MSG_MERGED, {"run": self.run, "offset": member.offset}, client_id=node)
        self.plugin.check_requests_done(self.cluster.completed)

    def refuse(self, node: str, reason: str) -> None:
        """One line; the worker is told why and to quit, and gets no users."""
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

    # ------------------------------------------------------------------ tickets

    def on_ask(self, environment, msg, **_kw) -> None:
        node, data = msg.node_id, msg.data
        scheduled = bool(data.get("scheduled", True))
        cluster = self.cluster
        budget = cluster.budget if cluster is not None else None
        if data.get("run") != self.run or budget is None or node not in self.verified or \
                (node in cluster.members and cluster.members[node].gone):
            block = Block(0 if scheduled else -1, 0, exhausted=True)
        else:
            cluster.asked(node, data)
            block = budget.grant(node, int(data.get("count", 1)), scheduled, len(self.running_nodes()))
            self.told_exhausted = self.told_exhausted or block.exhausted
        self.runner.send_message(MSG_GRANT, {"run": self.run, **block.to_wire()}, client_id=node)

    def tell_if_more(self) -> None:
        """Tickets came back (a lost worker's, an idle one's) after the workers heard there were none: say so."""
        budget = self.cluster.budget
        if self.told_exhausted and budget is not None and not budget.exhausted:
            self.told_exhausted = False
            self.runner.send_message(MSG_MORE, {"run": self.run})

    def running_nodes(self) -> list[str]:
        """Workers with users (or starting them) that are not missing."""
        clients = self.runner.clients
        return [node for node, c in clients.items() if c.state in (STATE_RUNNING, STATE_SPAWNING)] or \
            [node for node, c in clients.items() if c.state != STATE_MISSING]

    def complete_until(self) -> float:
        return self.cluster.complete_until(self.running_nodes())

    # ------------------------------------------------------------------ workers that leave

    def on_failed(self, environment, msg, **_kw) -> None:
        node, reason = msg.node_id, msg.data.get("reason", "")
        log.error(f"llmload: worker {node} stopped: {reason}")
        self.plugin.environment.process_exit_code = 1
        if self.cluster is not None and msg.data.get("run") == self.run:
            self.retire(node, "failed")

    def check_members(self, running: bool = False) -> None:
        """Workers of this run that went missing without their last report: retire them. ``running`` (the run goes
        on): a worker that stopped on its own (Ctrl-C, SIGTERM) and left holding tickets is retired too."""
        if self.cluster is None:
            return
        clients, budget = self.runner.clients, self.cluster.budget
        nodes = set(self.cluster.members) | {n for n, held in (budget.held if budget else {}).items() if held}
        for node in sorted(nodes):
            member, client = self.cluster.member(node), clients.get(node)
            gone = client is None or client.state == STATE_MISSING
            if member.active and gone:
                self.retire(node, "lost")
            elif running and gone and member.final and not member.gone and budget is not None and budget.held[node]:
                self.retire(node, "left")

    def retire(self, node: str, why: str) -> None:
        settings = self.plugin.settings
        retired = self.cluster.retire(node, why, settings.api, settings.mode, self.plugin.tasks())
        note = f"; {retired.shard_note}" if retired.shard_note else ""
        if why in ("lost", "left"):
            log.warning(f"llmload: worker {node} {'was lost' if why == 'lost' else 'left'} with {retired.lost} "
                        f"request(s) in flight: recorded as lost, their tickets returned to the other workers{note}")
        elif retired.lost or note:
            log.warning(f"llmload: worker {node}'s {retired.lost} request(s) in flight recorded as lost{note}")
        self.tell_if_more()
        self.plugin.check_requests_done(self.cluster.completed)

    def gather_finals(self) -> None:
        """The run stops: ask every worker still there for its last report, and wait for them all (bounded)."""
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
            if not [n for n in waiting if n in clients and clients[n].state != STATE_MISSING
                    and self.cluster.member(n).active]:
                break
            gevent.sleep(0.05)
        self.check_members()
        self.cluster.board.complete_until = None  # every worker's last report is in (or it was retired)

    def workers_summary(self) -> list[dict] | None:
        if self.cluster is None:
            return None
        return [{"worker": m.node, "results": m.done, "left": m.gone or None}
                for m in sorted(self.cluster.members.values(), key=lambda m: m.node)]


def drop_locust_part(data: dict, environment) -> None:
    """Empty Locust's stats in a worker report the master does not take (the suite's listener runs first: it is
    registered when the locustfile is imported, before Locust's own)."""
    data["stats"], data["errors"] = [], {}
    data["stats_total"] = StatsEntry(environment.stats, "Aggregated", None).serialize()
