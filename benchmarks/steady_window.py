"""How close the report's steady window comes to a known one: scripted raw logs with a known ramp and drain.

Each scenario writes raw results whose steady part is known (users joining one by
one until ``ramp`` seconds, then all of them until ``ramp + plateau``; or an open
loop whose Poisson rate climbs linearly to its level over ``ramp`` seconds), runs
:func:`reports.steady.find_window` on several seeds, and prints how far the
window's start and end fell from the truth, in percent of the run (negative:
early, i.e. some ramp kept; positive: late, some steady time lost), and how many
seeds found no window.

    python -m benchmarks.steady_window               # 20 seeds per scenario
    python -m benchmarks.steady_window --seeds 5
"""

from __future__ import annotations

import platform

import numpy as np

from llmload.core.cliargs import OneLineParser, positive_int
from llmload.core.metrics import RequestResult
from llmload.core.tables import render
from reports.steady import find_window

TTFT, ITL, TOKENS = 0.2, 0.04, 20
#: Seconds to the last token of a scripted request (before its jitter).
E2E = TTFT + (TOKENS - 1) * ITL


def scripted_request(i: int, start: float, rng: np.random.Generator, mode: str = "stream") -> RequestResult:
    """A stream request of TOKENS tokens, its TTFT and gaps up to 10 % above TTFT and ITL (sync: no chunks)."""
    ttft, itl = TTFT * (1 + rng.uniform(0, 0.1)), ITL * (1 + rng.uniform(0, 0.1))
    offsets = [ttft + k * itl for k in range(TOKENS)]
    return RequestResult(request_id=f"r{i}", task="qa", api="chat", mode=mode, start_time=start,
                         end_offset=offsets[-1] + 0.001, token_offsets=offsets if mode == "stream" else [],
                         output_tokens=TOKENS, output_tokens_source="usage", prompt_id=f"qa-{i}", status_code=200)


def closed_ramp(users: int, ramp_s: float, plateau_s: float, seed: int = 0, t0: float = 1000.0
                ) -> list[RequestResult]:
    """A closed loop whose users join evenly over ``ramp_s`` (the last at ``ramp_s``) and send until
    ``ramp_s + plateau_s`` (the last dispatch), then drain."""
    rng = np.random.default_rng(seed)
    stop = t0 + ramp_s + plateau_s
    out: list[RequestResult] = []
    for user in range(users):
        t = t0 + ramp_s * user / max(users - 1, 1)
        while t <= stop:
            out.append(scripted_request(len(out), t, rng))
            t += out[-1].end_offset + rng.uniform(0, 0.005)
    return out


def open_ramp(rate: float, ramp_s: float, plateau_s: float, seed: int = 0, mode: str = "stream",
              t0: float = 1000.0) -> list[RequestResult]:
    """Poisson arrivals whose rate climbs linearly from 0 to ``rate`` over ``ramp_s``, then holds (thinning)."""
    rng = np.random.default_rng(seed)
    out: list[RequestResult] = []
    t = 0.0
    while (t := t + rng.exponential(1.0 / rate)) <= ramp_s + plateau_s:
        if rng.uniform() <= min(1.0, t / ramp_s):
            out.append(scripted_request(len(out), t0 + t, rng, mode))
    return out


SCENARIOS = [
    ("closed, 8 users join over 20 s, 60 s plateau", lambda s: closed_ramp(8, 20, 60, s), 20, 60),
    ("closed, 16 users over 30 s, 30 s plateau", lambda s: closed_ramp(16, 30, 30, s), 30, 30),
    ("closed, 4 users over 10 s, 80 s plateau", lambda s: closed_ramp(4, 10, 80, s), 10, 80),
    ("closed, 2 users over 5 s, 60 s plateau", lambda s: closed_ramp(2, 5, 60, s), 5, 60),
    ("closed, 8 users at once, 60 s", lambda s: closed_ramp(8, 0.001, 60, s), 0.001, 60),
    ("open, stream, 0 to 8 req/s over 20 s, 60 s", lambda s: open_ramp(8, 20, 60, s), 20, 60),
    ("open, sync, 0 to 30 req/s over 20 s, 60 s", lambda s: open_ramp(30, 20, 60, s, "sync"), 20, 60),
    ("open, stream, 8 req/s from the start, 60 s", lambda s: open_ramp(8, 0.001, 60, s), 0.001, 60),
]


def measure(make, ramp_s: float, plateau_s: float, seeds: int) -> list:
    """[seeds without a window, start error min/median/p90/max, end error min/median] in % of the run."""
    span = ramp_s + plateau_s
    starts, ends, none = [], [], 0
    for seed in range(seeds):
        window, _ = find_window(make(seed))
        if window is None:
            none += 1
            continue
        starts.append(100.0 * (window.start - window.first - ramp_s) / span)
        ends.append(100.0 * (window.end - window.first - span) / span)
    if not starts:
        return [none] + [None] * 6
    s, e = np.array(starts), np.array(ends)
    return [none] + [f"{v:+.1f}" for v in (s.min(), np.median(s), np.percentile(s, 90), s.max(), e.min(),
                                           np.median(e))]


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m benchmarks.steady_window",
                      description="Accuracy of the report's steady window on scripted ramps.")
    p.add_argument("--seeds", type=positive_int, default=20, help="seeds per scenario (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"steady window on scripted ramps: {args.seeds} seeds per scenario; {platform.python_version()}; "
          "errors in % of the run (start: - keeps ramp, + loses steady time; end: - ends early)")
    body = [[name] + measure(make, ramp_s, plateau_s, args.seeds) for name, make, ramp_s, plateau_s in SCENARIOS]
    print(render(body, ["scenario", "no window", "start min", "start median", "start p90", "start max", "end min",
                        "end median"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
