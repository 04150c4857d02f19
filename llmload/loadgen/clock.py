"""The probe of a process's own timing error: a byte on a pipe, as a chunk on a socket, and how late it is seen.

An OS thread (not a greenlet: it runs whatever the event loop does) writes its
clock reading to a pipe every :data:`~llmload.core.clienterror.PROBE_INTERVAL_S`.
A greenlet waits on the pipe as the users wait on their sockets; when the loop
wakes it, it yields once more (``gevent.sleep(0)`` resumes only after every
other greenlet the same loop pass woke has run) and, while requests are in
flight, records the delay from the write to then
(:class:`~llmload.core.clienterror.ClockReading`). A chunk that reached its
socket at the moment of the write was stamped within that pass: the delay
holds the OS waking the process, the greenlets run before it and its own work.
A timer would not do: the loop rounds its timeouts up to the millisecond. The
reading also keeps the process's CPU and wall seconds since the test started.
"""

from __future__ import annotations

import os
import struct
import time
from typing import Callable

import gevent
from gevent import monkey
from gevent.socket import wait_read

from llmload.core.clienterror import PROBE_INTERVAL_S, ClockReading

STAMP = struct.Struct("d")


class LoopProbe:
    """Samples the event loop's delay while ``busy()`` (requests in flight), into :attr:`reading`."""

    def __init__(self, busy: Callable[[], bool], interval_s: float = PROBE_INTERVAL_S):
        self.busy = busy
        self.interval_s = interval_s
        self.reading = ClockReading()
        self._greenlet: gevent.Greenlet | None = None
        self._generation = 0  # the writer thread of an earlier start stops when this moves on
        self._pipe: tuple[int, int] | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> ClockReading:
        """A new reading, sampled from now on (the one it replaces is left as it was)."""
        self.stop()
        if self._pipe is None:
            self._pipe = os.pipe()
            for fd in self._pipe:
                os.set_blocking(fd, False)
        self.reading = ClockReading()
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._generation += 1
        start_thread = monkey.get_original("_thread", "start_new_thread")  # a real thread under Locust's patching
        start_thread(self._write, (self._generation, self._pipe[1]))
        self._greenlet = gevent.spawn(self._read, self._pipe[0])
        return self.reading


    def stop(self) -> None:
        if self._greenlet is not None:
            self.update()
            self._generation += 1
            self._greenlet.kill(block=False)
            self._greenlet = None

    def update(self) -> None:
        """Bring the reading's CPU and wall seconds up to now."""
        self.reading.cpu_s = time.process_time() - self._cpu0
        self.reading.wall_s = time.perf_counter() - self._wall0

    def _write(self, generation: int, fd: int) -> None:
        """The writer thread: its clock reading on the pipe every interval, until the probe stops or restarts."""
        sleep = monkey.get_original("time", "sleep")
        while generation == self._generation:
            sleep(self.interval_s)
            try:
                os.write(fd, STAMP.pack(time.perf_counter()))
            except OSError:  # the pipe is full (the loop has not read it for seconds): the next one
                pass

    def _read(self, fd: int) -> None:
        pending = b""
        while True:
            wait_read(fd)
            try:
                pending += os.read(fd, 4096)
            except BlockingIOError:
                continue
            gevent.sleep(0)
            done = time.perf_counter()
            whole = len(pending) - len(pending) % STAMP.size
            if self.busy():
                for (written,) in STAMP.iter_unpack(pending[:whole]):
                    self.reading.add(done - written)
            pending = pending[whole:]
            self.update()
