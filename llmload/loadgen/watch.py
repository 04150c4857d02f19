"""What a run says while it runs, once each: the generator fell behind its schedule, or no server answers."""

from __future__ import annotations

import time

from llmload.core.defaults import LAG_WARN_S
from llmload.loadgen.live import LiveBoard

#: A run in which nothing answered for this long from its first request stops with one line.
NO_SERVER_S = 10.0


class Watch:
    """Reads the live board (standalone, or the master's merged one) and says each thing at most once."""

    def __init__(self):
        self.lag_warned = False
        self.no_server_said = False

    def behind(self, board: LiveBoard, users: int | None, final: bool = False) -> str | None:
        """The warning line, the first time the dispatch lag p99 passes :data:`~llmload.core.defaults.LAG_WARN_S`
        (over the last seconds, or at the end over the run)."""
        if self.lag_warned:
            return None
        if final:
            lag, where = board.total().get("dispatch_lag", "p99"), "over the run"
            lag = None if lag is None else lag * 1000.0
        else:
            lag, where = board.window().get("dispatch_lag_p99_ms"), "over the last seconds"
        if lag is None or lag <= LAG_WARN_S * 1000.0:
            return None
        self.lag_warned = True
        return (f"llmload: warning: the load generator fell behind its schedule: dispatch lag p99 {lag:.1f} ms "
                f"{where}; {board.counts.late} request(s) were due while all {users} users (-u) were busy: raise -u, "
                "or add workers if the client's CPU is saturated")

    def no_server(self, board: LiveBoard, host: str, at_stop: bool = False, now: float | None = None) -> str | None:
        """The error line when every request so far was refused, :data:`NO_SERVER_S` after the first (or at the
        end); the run should then stop."""
        counts = board.counts
        if self.no_server_said or counts.successes or counts.first_failure is None:
            return None
        if board.unreachable_so_far() <= 0:
            return None  # failures of another kind: the server is there
        now = time.time() if now is None else now
        if not at_stop and now - counts.first_failure < NO_SERVER_S:
            return None
        self.no_server_said = True
        return (f"error: no server answered at {host or 'the host'} (connection refused): start it first (python -m "
                "server --port 8000, or python -m server.vllm_launcher), or point -H at it")
