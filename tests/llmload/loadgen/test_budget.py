"""Tickets: --requests exact in blocks, fair shares at the end, warm-up, scheduled starts, pools, lost workers."""

import time

import pytest

from llmload.loadgen.budget import Block, Budget, TicketPool
from llmload.loadgen.schedule import Schedule, TraceSchedule

pytestmark = pytest.mark.unit


def tickets(block: Block) -> list:
    return block.tickets()


def test_blocks_count_requests_exactly_and_the_first_ones_are_warmup():
    budget = Budget(requests=5, warmup=2)
    first = tickets(budget.grant("w1", 3))
    rest = tickets(budget.grant("w1", 10))
    assert [t.index for t in first + rest] == [0, 1, 2, 3, 4]
    assert [t.warmup for t in first + rest] == [True, True, False, False, False]
    assert budget.exhausted and budget.held["w1"] == 5
    empty = budget.grant("w2", 4)
    assert empty.count == 0 and empty.exhausted and tickets(empty) == []


def test_near_the_end_a_block_is_a_fair_share_of_what_is_left():
    budget = Budget(requests=10)
    assert budget.grant("a", 100, share=2).count == 5  # 10 left over two workers
    assert budget.grant("b", 100, share=2).count == 3  # ceil(5 / 2)
    assert budget.grant("a", 100, share=2).count == 1 and budget.grant("b", 100, share=2).count == 1
    assert budget.exhausted and budget.grant("a", 1, share=2).count == 0


def test_a_lost_worker_gives_its_outstanding_tickets_back():
    budget = Budget(requests=4)
    budget.grant("a", 2)
    budget.grant("b", 2)
    budget.done("a")
    assert budget.lose("b") == 2 and not budget.exhausted and budget.remaining == 2
    assert [t.index for t in tickets(budget.grant("a", 5))] == [4, 5]  # the next places; b's are skipped
    assert budget.exhausted


def test_an_idle_worker_gives_back_what_it_will_not_use():
    budget = Budget(requests=6)
    budget.grant("a", 6)
    budget.done("a", 2)
    budget.give_back("a", 10)  # never more than it holds
    assert budget.held["a"] == 0 and budget.remaining == 4


def test_open_loop_blocks_carry_the_schedule():
    budget = Budget(schedule=Schedule(1000.0, "constant"))
    a, b = tickets(budget.grant("x", 2)), tickets(budget.grant("y", 1))
    starts = [t.intended_start for t in a + b]
    assert starts[1] - starts[0] == pytest.approx(0.001, abs=1e-6)
    assert starts[2] - starts[1] == pytest.approx(0.001, abs=1e-6)
    assert not budget.exhausted  # no --requests: no end


def test_follow_up_credits_count_but_take_no_place_in_the_schedule():
    budget = Budget(requests=3, schedule=Schedule(1.0, "constant"))
    first = tickets(budget.grant("", 1))[0]
    follow = budget.grant("", 1, scheduled=False)
    assert follow.first == -1 and tickets(follow)[0].index == -1 and tickets(follow)[0].intended_start is None
    second = tickets(budget.grant("", 5))
    assert len(second) == 1 and second[0].intended_start == pytest.approx(first.intended_start + 1.0, abs=1e-6)
    assert budget.exhausted


def test_a_block_survives_the_wire():
    block = Budget(requests=9, warmup=1, schedule=Schedule(5.0, "constant")).grant("w", 3)
    again = Block.from_wire(block.to_wire())
    assert again == block and [t.warmup for t in again.tickets()] == [True, False, False]


def test_a_pool_hands_tickets_in_order_and_asks_ahead_by_its_recent_rate():
    pool = TicketPool(horizon_s=0.5, max_block=64)
    assert pool.want(users=4) == 4  # nothing known yet: one per user
    pool.asked()
    assert pool.want(users=4) == 0  # a request is out
    pool.add(Budget().grant("", 4))
    assert [pool.take().index for _ in range(3)] == [0, 1, 2] and pool.taken == 3
    assert pool.want(users=4) == 4  # too soon to know the rate: still one per user
    time.sleep(0.3)  # 3 taken in at least 0.3 s: at most 10/s, so half a second's worth is at most 5
    assert pool.want(users=1) <= 5 and pool.rate <= 10
    pool.asked()
    pool.add(Block(4, 0, exhausted=True))
    assert pool.take().index == 3 and pool.take() is None and pool.exhausted and pool.want(users=4) == 0


def test_a_pool_gives_back_what_it_holds_and_follow_ups_use_credits():
    pool = TicketPool()
    pool.add(Budget().grant("", 5))
    assert pool.take(scheduled=False) is None and pool.want(users=3, scheduled=False) == 3
    pool.add(Budget().grant("", 2, scheduled=False))
    assert pool.take(scheduled=False).index == -1 and pool.credits == 1
    assert pool.give_back() == 6 and pool.take() is None


def test_once_the_budget_is_used_up_a_follow_up_takes_the_last_scheduled_ticket():
    budget, pool = Budget(requests=6), TicketPool()
    pool.add(budget.grant("", 4))
    assert pool.take().index == 0 and pool.take(scheduled=False) is None  # no credit yet: ask the budget
    pool.add(budget.grant("", 2))
    assert pool.exhausted and pool.take(scheduled=False).index == -1
    assert [t.index for t in pool.tickets] == [1, 2, 3, 4]


def test_a_trace_schedule_gives_each_ticket_its_own_offset_and_ends_with_the_trace():
    budget = Budget(requests=4, schedule=TraceSchedule([0.0, 0.25, 0.25, 3.5]))
    first, rest = budget.grant("w1", 3), budget.grant("w2", 10)
    starts = [t.intended_start for t in first.tickets() + rest.tickets()]
    assert [round(s - starts[0], 9) for s in starts] == [0.0, 0.25, 0.25, 3.5]
    assert [t.index for t in first.tickets() + rest.tickets()] == [0, 1, 2, 3] and rest.exhausted
    budget.give_back("w2", 1)  # a trace's place given back is not handed out again: the trace has no more
    assert budget.grant("w1", 5).count == 0 and budget.exhausted
