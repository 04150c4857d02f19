"""Tickets: which request may go out next, its index, when it is due, and whether it is a warm-up request.

One :class:`Budget` lives where the run is led (standalone, or the master). It
enforces ``--requests`` exactly over all users and workers, numbers the
requests (the first ``--warmup`` are warm-up), and in an open loop gives each
ticket its intended start from the :class:`~llmload.loadgen.schedule.Schedule`.
It hands tickets out in blocks (:meth:`Budget.grant`), so a worker asks once
per block, not once per request; near the end of ``--requests`` a block is at
most a fair share of what is left, so the last requests spread over the
workers. It counts the tickets each worker holds without a result on record,
so a worker that disappears can have them returned (:meth:`Budget.lose`).

Each process keeps a :class:`TicketPool`: the tickets it was granted, handed to
its users in order, and the size of the next block to ask for (about
:data:`HORIZON_S` of what it used lately, at least one per user).
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass

from llmload.loadgen.schedule import Schedule

#: Seconds of tickets a pool asks for at once (it asks again when half of them are used).
HORIZON_S = 0.5
#: Most tickets in one block.
MAX_BLOCK = 1000
#: Shortest span over which a pool measures how fast it uses tickets.
RATE_SPAN_S = 0.25


@dataclass(frozen=True)
class Ticket:
    index: int  # over all users and workers, from 0 (-1: a follow-up turn, or no budget)
    intended_start: float | None = None  # epoch seconds (open loop)
    warmup: bool = False


@dataclass(frozen=True)
class Block:
    """Tickets granted at once: ``count`` indexes from ``first`` (with their intended starts in an open loop), or
    ``count`` follow-up credits (``first`` = -1), and whether the budget is used up after them."""

    first: int
    count: int
    starts: tuple[float, ...] | None = None
    warmup: int = 0  # indexes below this are warm-up
    exhausted: bool = False

    def tickets(self) -> list[Ticket]:
        if self.first < 0:
            return [Ticket(-1)] * self.count
        return [Ticket(self.first + k, self.starts[k] if self.starts else None, self.first + k < self.warmup)
                for k in range(self.count)]

    def to_wire(self) -> dict:
        return {"first": self.first, "count": self.count, "starts": list(self.starts) if self.starts else None,
                "warmup": self.warmup, "exhausted": self.exhausted}

    @classmethod
    def from_wire(cls, data: dict) -> "Block":
        starts = data.get("starts")
        return cls(data["first"], data["count"], tuple(starts) if starts else None, data["warmup"], data["exhausted"])


class Budget:
    """Hands out tickets: at most ``requests`` (0: no limit) that are not lost, in index order."""

    def __init__(self, requests: int = 0, warmup: int = 0, schedule: Schedule | None = None):
        self.requests, self.warmup, self.schedule = requests, warmup, schedule
        self.granted = 0  # tickets that count against --requests (those of lost workers are given back)
        self.next_index = 0
        self.held: Counter[str] = Counter()  # node -> tickets out whose result is not on record

    @property
    def exhausted(self) -> bool:
        return (bool(self.requests) and self.granted >= self.requests) or self._left_in_schedule == 0

    @property
    def _left_in_schedule(self) -> int | None:
        """Places left in a schedule that ends (a trace's): tickets given back do not get theirs again."""
        length = None if self.schedule is None else self.schedule.length
        return None if length is None else max(length - self.next_index, 0)

    @property
    def remaining(self) -> int | None:
        return max(self.requests - self.granted, 0) if self.requests else None

    def grant(self, node: str, count: int, scheduled: bool = True, share: int = 1) -> Block:
        """Up to ``count`` tickets for ``node`` ('' = this process): with ``--requests``, at most the remaining
        tickets divided by ``share`` (the workers asking), rounded up.

        ``scheduled=False`` grants follow-up credits (a conversation's later turns): they count against
        ``--requests`` but take no place in the schedule and no index.
        """
        count = max(count, 0)
        if self.requests:
            count = min(count, math.ceil(self.remaining / max(share, 1)))
        if scheduled and self._left_in_schedule is not None:
            count = min(count, self._left_in_schedule)
        self.granted += count
        self.held[node] += count
        if not scheduled:
            return Block(-1, count, exhausted=self.exhausted)
        first = self.next_index
        self.next_index += count
        starts = None
        if self.schedule is not None and count:
            self.schedule.begin(time.time())
            starts = tuple(self.schedule.next()[1] for _ in range(count))
        return Block(first, count, starts, self.warmup, self.exhausted)

    def done(self, node: str = "", count: int = 1) -> None:
        """Results for ``count`` of ``node``'s tickets are on record."""
        self.held[node] = max(self.held[node] - count, 0)

    def give_back(self, node: str, count: int) -> None:
        """``node`` returns ``count`` tickets it will not use (their places in the schedule are skipped)."""
        count = min(count, self.held[node])
        self.held[node] -= count
        self.granted -= count

    def lose(self, node: str) -> int:
        """``node`` is gone: give its outstanding tickets back; return how many it held."""
        count = self.held.pop(node, 0)
        self.granted -= count
        return count


class TicketPool:
    """One process's granted tickets, taken by its users in order; says when to ask for more and how many."""

    def __init__(self, horizon_s: float = HORIZON_S, max_block: int = MAX_BLOCK):
        self.horizon_s, self.max_block = horizon_s, max_block
        self.tickets: deque[Ticket] = deque()
        self.credits = 0  # follow-up turns granted
        self.exhausted = False  # the budget said it is used up (until it says there is more)
        self.asking = {True: False, False: False}  # scheduled / follow-up: a request is out
        self.taken = 0  # tickets handed to users (follow-ups included), since the run began
        self.rate = 0.0  # tickets taken per second, measured over at least RATE_SPAN_S
        self._since = (time.monotonic(), 0)  # (when, taken) where the current measurement began

    def add(self, block: Block) -> None:
        if block.first < 0:
            self.credits += block.count
        else:
            self.tickets.extend(block.tickets())
        self.asking[block.first >= 0] = False
        self.exhausted = block.exhausted

    def take(self, scheduled: bool = True) -> Ticket | None:
        """The next ticket, or None when there is none in hand.

        A follow-up turn takes a credit; once the budget is used up, it takes the last scheduled ticket in hand
        instead (a conversation under way goes on rather than a new one starting).
        """
        if not scheduled:
            if self.credits:
                self.credits -= 1
            elif self.exhausted and self.tickets:
                self.tickets.pop()
            else:
                return None
            self.taken += 1
            return Ticket(-1)
        if not self.tickets:
            return None
        self.taken += 1
        return self.tickets.popleft()

    def want(self, users: int, scheduled: bool = True) -> int:
        """How many tickets to ask for now (0: enough in hand, a request is out, or the budget is used up)."""
        if self.exhausted or self.asking[scheduled]:
            return 0
        if not scheduled:  # follow-up turns: about one per user at a time
            size = max(users, 1)
            return 0 if self.credits * 2 > size else size
        now, taken = time.monotonic(), self.taken
        since, then = self._since
        if now - since >= RATE_SPAN_S:
            self.rate, self._since = (taken - then) / (now - since), (now, taken)
        size = min(self.max_block, max(users, 1, math.ceil(self.rate * self.horizon_s)))
        return 0 if len(self.tickets) * 2 > size else size

    def asked(self, scheduled: bool = True) -> None:
        self.asking[scheduled] = True

    def give_back(self) -> int:
        """Drop the tickets in hand (their users are gone); return how many."""
        count = len(self.tickets) + self.credits
        self.tickets.clear()
        self.credits = 0
        return count
