"""Retries of a rejected request (``--retry N``): which answers are retried, and how long to wait before each.

A request answered ``429 Too Many Requests`` or ``503 Service Unavailable`` (the
server says "not now": :data:`RETRY_STATUSES`) is sent again, up to ``retries``
more times. Before each new attempt the client waits what the answer's
``Retry-After`` header says (seconds, or an HTTP date), else an exponential
backoff with jitter: attempt ``k`` (0 = the first retry) waits a uniform draw
in ``[d / 2, d]`` with ``d = min(max_wait, BACKOFF_BASE_S * 2 ** k)``. A
``Retry-After`` longer than ``max_wait`` is honoured by not retrying: the
request fails as answered, the reason in its error. A refused or reset
connection is not retried: the server is not there, which the load generator
counts as an outage and backs off from (:mod:`llmload.loadgen.user`); retrying
would fold the outage into the latencies. Other failures (5xx but 503, time-outs,
broken streams) are not retried either: the server did try, and failed.

The waits count against the request's own ``--timeout``: a retry whose wait
would pass it is not made. What the client does is in the raw log
(:class:`llmload.core.metrics.RequestResult` ``retries``).
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
from dataclasses import dataclass

#: The answers a retry is for: the server asked the client to come back later.
RETRY_STATUSES = (429, 503)
#: Seconds of the first backoff without a Retry-After (doubling each retry, capped by ``max_wait``).
BACKOFF_BASE_S = 0.5


def parse_retry_after(value: str, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds, or an HTTP date (seconds from ``now``, epoch
    seconds, at least 0); None when it is absent or not either."""
    text = (value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:  # an HTTP date is GMT; a date without a zone is read so
        when = when.replace(tzinfo=dt.timezone.utc)
    now = dt.datetime.now(dt.timezone.utc).timestamp() if now is None else now
    return max(when.timestamp() - now, 0.0)


@dataclass(frozen=True)
class RetryPolicy:
    """Retry a :data:`RETRY_STATUSES` answer up to ``retries`` times, each wait at most ``max_wait`` seconds."""

    retries: int
    max_wait: float
    base: float = BACKOFF_BASE_S

    def backoff(self, retry: int, draw: float | None = None) -> float:
        """Seconds before retry number ``retry`` (0 = the first) without a Retry-After: jittered, capped.
        ``draw`` in [0, 1) replaces the random draw."""
        ceiling = min(self.max_wait, self.base * 2.0 ** retry)
        draw = random.random() if draw is None else draw
        return ceiling / 2.0 + draw * ceiling / 2.0

    def wait(self, status: int, retry_after: str, retry: int, now: float | None = None) -> tuple[float | None, str]:
        """(seconds to wait before retry number ``retry``, "") for an answer of ``status`` with the header
        ``retry_after``; (None, why not) when it is not retried (not a retryable status, no retry left, or a
        Retry-After beyond ``max_wait``)."""
        if status not in RETRY_STATUSES or retry >= self.retries:
            return None, ""
        asked = parse_retry_after(retry_after, now)
        if asked is None:
            return self.backoff(retry), ""
        if asked > self.max_wait:
            return None, f"not retried: Retry-After {asked:g} s > --retry-max-wait {self.max_wait:g} s"
        return asked, ""
