"""Client-side cancellation: when a request is abandoned (``--cancel-after``) and which ones are (``--cancel-rate``).

``--cancel-after`` says when the client closes the connection, counted one of three ways:

* ``2s``, ``500ms``: that long after the request was sent;
* ``ttft+1s``: that long after the first output chunk arrived (stream only);
* ``20tok``: once 20 output tokens have arrived (stream only; the server's running
  count where it sends one, else one token per output chunk).

``LOW..HIGH`` (both ends of one kind: ``1s..3s``, ``ttft+200ms..2s``, ``10tok..50tok``)
draws each cancelled request's point uniformly between the two.

Which requests cancel is drawn per request index from ``--seed``
(:meth:`CancelPolicy.point`), so the same seed cancels the same requests at the
same points. A request that ends before its point is a normal success.
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
from dataclasses import dataclass

from llmload.core.cliargs import parse_duration

#: The kinds of cancel point: after the send, after the first output chunk, after a number of output tokens.
KINDS = ("send", "ttft", "tokens")
SYNTAX = "DURATION (2s, 500ms), ttft+DURATION or Ntok, or LOW..HIGH of one kind (1s..3s, ttft+0.2s..1s, 10tok..50tok)"

_TOKENS = re.compile(r"^([0-9]+)tok$")


@dataclass(frozen=True)
class CancelPoint:
    """When one request is abandoned: ``kind`` (:data:`KINDS`) and ``value`` (seconds, or tokens)."""

    kind: str
    value: float

    def describe(self) -> str:
        """``1.25s``, ``ttft+0.5s`` or ``20tok``: the point as the raw log keeps it."""
        if self.kind == "tokens":
            return f"{int(self.value)}tok"
        return ("ttft+" if self.kind == "ttft" else "") + f"{self.value:.4g}s"


@dataclass(frozen=True)
class CancelAfter:
    """A parsed ``--cancel-after``: a kind and a range (``low == high``: fixed)."""

    kind: str
    low: float
    high: float

    @property
    def needs_stream(self) -> bool:
        return self.kind != "send"

    def draw(self, rng: random.Random) -> CancelPoint:
        if self.kind == "tokens":
            return CancelPoint(self.kind, float(rng.randint(int(self.low), int(self.high))))
        return CancelPoint(self.kind, self.low if self.low == self.high else rng.uniform(self.low, self.high))


def _one(text: str) -> tuple[str, float]:
    """One end of a range: ``(kind, value)``; ValueError when it is none of the forms."""
    text = text.strip().lower()
    match = _TOKENS.match(text)
    if match:
        if int(match.group(1)) < 1:
            raise ValueError
        return "tokens", float(match.group(1))
    if text.startswith("ttft+"):
        return "ttft", parse_duration(text[len("ttft+"):], "s")
    return "send", parse_duration(text, "s")


def parse_cancel_after(text: str) -> CancelAfter:
    """``--cancel-after``'s value (see the module docstring); ValueError (one line) says what is wrong."""
    low_text, sep, high_text = text.partition("..")
    try:
        kind, low = _one(low_text)
        high_kind, high = _one(high_text if sep else low_text)
        if kind == "ttft" and sep and not high_text.strip().lower().startswith("ttft+"):
            high_kind, high = _one("ttft+" + high_text)  # ttft+0.2s..1s: the high end is after the first token too
    except ValueError:
        raise ValueError(f"{text!r} is not a cancel point: use {SYNTAX}") from None
    if high_kind != kind:
        raise ValueError(f"{text!r}: both ends of LOW..HIGH must be of one kind (seconds, ttft+seconds or tokens)")
    if high < low:
        raise ValueError(f"{text!r}: LOW must not be above HIGH")
    return CancelAfter(kind, low, high)


def cancel_after_text(text: str) -> str:
    """argparse type of ``--cancel-after``: the text itself once it parses (it travels to Locust's workers as text);
    blank: none (the default)."""
    if not text.strip():
        return ""
    try:
        parse_cancel_after(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()


class CancelPolicy:
    """Which requests cancel (share ``rate``) and at what point, drawn per request index from ``seed``."""

    def __init__(self, rate: float, after: CancelAfter, seed: int = 0, stream: str = ""):
        self.rate, self.after, self.seed = rate, after, seed
        self._stream = stream  # names this process's own sequence where requests have no index
        self._next = itertools.count()

    def point(self, index: int = -1) -> CancelPoint | None:
        """The cancel point of request ``index`` (over the whole run), or None when it is not cancelled.

        ``index`` -1 (a run without a request budget, or a follow-up turn): the next draw of this process's own
        sequence, reproducible per process.
        """
        key = f"{self.seed}:{index}" if index >= 0 else f"{self.seed}:{self._stream}:n{next(self._next)}"
        rng = random.Random(f"cancel:{key}")
        if rng.random() >= self.rate:
            return None
        return self.after.draw(rng)
