"""The loop probe sees how late the event loop runs it: known stalls of the loop show in its delays."""

from __future__ import annotations

import time

import gevent
import pytest

from llmload.loadgen.clock import LoopProbe

pytestmark = [pytest.mark.unit, pytest.mark.serial]  # wall-clock bounds on the loop's delays

INTERVAL_S = 0.02
STALL_S = 0.04


def run_probe(seconds: float, stall_every_s: float | None = None, busy: bool = True) -> LoopProbe:
    """A probe over ``seconds`` of this process's gevent loop, stalled for STALL_S every ``stall_every_s``."""
    probe = LoopProbe(lambda: busy, interval_s=INTERVAL_S)

    def stall() -> None:
        while True:
            gevent.sleep(stall_every_s)
            until = time.perf_counter() + STALL_S
            while time.perf_counter() < until:  # holds the loop (and the GIL, which the writer thread still gets)
                pass

    staller = gevent.spawn(stall) if stall_every_s else None
    probe.start()
    try:
        gevent.sleep(seconds)
    finally:
        probe.stop()
        if staller is not None:
            staller.kill()
    return probe


def test_stalls_of_the_loop_show_in_the_delays():
    probe = run_probe(2.0, stall_every_s=0.1)
    r = probe.reading
    assert r.samples >= 30, r.samples
    # about a third of the time is stalled: the largest delays are the stalls' length, none much beyond it
    assert 0.7 * STALL_S <= r.quantile(1.0) <= STALL_S + 0.06, r.quantile(1.0)
    assert r.quantile(0.9) >= 0.2 * STALL_S
    assert r.cpu_s > 0.1 and 0 < r.cpu_share <= 1.05 and 1.9 <= r.wall_s <= 3.0


def test_an_idle_loop_has_small_delays_and_nothing_is_recorded_while_no_request_is_in_flight():
    quiet = run_probe(1.0).reading
    assert quiet.samples >= 15
    assert quiet.quantile(0.5) < 0.01  # a shared machine: the OS may still wake the process late now and then
    assert run_probe(0.5, busy=False).reading.samples == 0


def test_a_restarted_probe_starts_a_new_reading():
    probe = LoopProbe(lambda: True, interval_s=INTERVAL_S)
    first = probe.start()
    gevent.sleep(0.3)
    second = probe.start()
    gevent.sleep(0.3)
    probe.stop()
    kept = first.samples
    gevent.sleep(0.1)
    assert second is probe.reading and second is not first and first.samples == kept
    assert second.samples >= 5 and second.wall_s < 0.6
