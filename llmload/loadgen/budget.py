"""Tickets: which request may go out next, its index, when it is due, and whether it is a warm-up request.

One :class:`Budget` lives where the raw log is written (standalone, or the
master); workers ask it for a ticket before each request. It enforces
``--requests`` exactly over all users and workers, numbers the requests (the
first ``--warmup`` are warm-up), and in an open loop gives each ticket its
intended start from the :class:`~llmload.loadgen.schedule.Schedule`. It counts
the tickets each worker holds, so a worker that disappears can have them
returned (:meth:`Budget.lose`).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass

from llmload.loadgen.schedule import Schedule


@dataclass(frozen=True)
class Ticket:
    index: int  # over all users and workers, from 0
    intended_start: float | None = None  # epoch seconds (open loop)
    warmup: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


class Budget:
    """Hands out tickets: at most ``requests`` (0: no limit) that are not lost, in index order."""

    def __init__(self, requests: int = 0, warmup: int = 0, schedule: Schedule | None = None):
        self.requests, self.warmup, self.schedule = requests, warmup, schedule
        self.granted = 0  # tickets that count against --requests (lost ones are given back)
        self.next_index = 0
        self.held: Counter[str] = Counter()  # node -> tickets out whose result has not arrived
        self.late = 0  # open loop: tickets already due when a user asked (every user was busy)

    @property
    def exhausted(self) -> bool:
        return bool(self.requests) and self.granted >= self.requests

    def take(self, node: str = "", scheduled: bool = True) -> Ticket | None:
        """The next ticket for a user of ``node`` ('' = this process), or None once the budget is used up.

        ``scheduled=False`` asks for a follow-up request (a conversation's later turn): it counts against
        ``--requests`` but takes no place in the schedule and no index.
        """
        if self.exhausted:
            return None
        self.granted += 1
        self.held[node] += 1
        if not scheduled:
            return Ticket(-1)
        if self.schedule is not None:
            self.schedule.begin(time.time())
            index, due = self.schedule.next()
            if due < time.time():
                self.late += 1
        else:
            index, due = self.next_index, None
            self.next_index += 1
        return Ticket(index, due, warmup=index < self.warmup)

    def done(self, node: str = "") -> None:
        """A result for one of ``node``'s tickets arrived."""
        if self.held[node] > 0:
            self.held[node] -= 1

    def lose(self, node: str) -> int:
        """``node`` is gone: give its outstanding tickets back; return how many it held."""
        count = self.held.pop(node, 0)
        self.granted -= count
        return count
