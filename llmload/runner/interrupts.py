"""SIGINT and SIGTERM for the runner: stop in order (Locust, then the server), never half-way through a record.

:class:`StopSignal` is installed once by the command line. Outside a cell a
signal raises :class:`Interrupted` at once (so a server that is starting is
stopped at once); inside a cell (:meth:`StopSignal.deferred`) it is only noted,
and the cell runner asks Locust to stop gracefully and records the cell before
the run goes on to stop the server. Later signals never raise: they only tell
the cell runner to stop Locust without waiting.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was asked to stop by ``signum`` (a BaseException, as KeyboardInterrupt, so nothing swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM, as a shell reports them."""
        return 128 + self.signum


class StopSignal:
    """What the runner has been asked: nothing yet, or to stop (by which signal, how many times)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.count = 0
        self._defer = 0
        self._raised = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> "StopSignal":
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def request(self, signum: int) -> None:
        """Note a stop request (what the handler does; tests call it directly)."""
        if self.signum is None:
            self.signum = signum
        self.count += 1

    def _handle(self, signum: int, _frame) -> None:
        self.request(signum)
        if not self._defer and not self._raised:
            self._raised = True
            raise Interrupted(self.signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a stop was requested (once)."""
        if self.signum is not None and not self._raised:
            self._raised = True
            raise Interrupted(self.signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """While inside, signals are noted, not raised (the caller polls :attr:`requested`)."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1
