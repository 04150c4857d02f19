"""Tickets: --requests exact, warm-up numbering, scheduled starts, lost workers' tickets given back."""

import time

import pytest

from llmload.loadgen.budget import Budget
from llmload.loadgen.schedule import Schedule


def test_requests_are_counted_exactly_and_the_first_ones_are_warmup():
    budget = Budget(requests=5, warmup=2)
    tickets = [budget.take("w1") for _ in range(7)]
    assert [t.index for t in tickets[:5]] == [0, 1, 2, 3, 4] and tickets[5:] == [None, None]
    assert [t.warmup for t in tickets[:5]] == [True, True, False, False, False]
    assert budget.exhausted and budget.held["w1"] == 5


def test_a_lost_worker_gives_its_tickets_back():
    budget = Budget(requests=4)
    for node in ("a", "b", "a", "b"):
        budget.take(node)
    budget.done("a")
    assert budget.lose("b") == 2 and not budget.exhausted
    assert budget.take("a").index == 4 and budget.take("a").index == 5 and budget.take("a") is None


def test_open_loop_tickets_carry_the_schedule_and_count_late_ones():
    budget = Budget(schedule=Schedule(1000.0, "constant"))
    first = budget.take()
    second = budget.take()
    assert second.intended_start - first.intended_start == pytest.approx(0.001, abs=1e-6)
    time.sleep(0.05)
    budget.take()  # already due: every user was busy
    assert budget.late >= 1


def test_follow_up_tickets_count_but_take_no_place_in_the_schedule():
    budget = Budget(requests=3, schedule=Schedule(1.0, "constant"))
    first = budget.take()
    follow = budget.take(scheduled=False)
    assert follow.index == -1 and follow.intended_start is None
    assert budget.take().intended_start == pytest.approx(first.intended_start + 1.0, abs=1e-6) and budget.take() is None
