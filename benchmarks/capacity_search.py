"""Time to answer of the capacity search, and its interval, before and after a change: the runner's own searches.

    python -m benchmarks.capacity_search --before /tmp/capacity-before            # the known server, 3 rounds
    python -m benchmarks.capacity_search --before /tmp/capacity-before --rounds 5 --ci 3.5
    python -m benchmarks.capacity_search --before /tmp/capacity-before --servers basic-batched --tasks qa \\
        --slo ttft=2s,tpot=200ms --slo-target 95 --pool 16 --requests 32 --max-tokens 32 --arrival poisson \\
        --max-lag 500 --capacity-looks 5 --cell-timeout 1200                   # a real server (quiet machine)

``--before DIR`` is another checkout of the suite, the code before the change (e.g.
``git worktree add /tmp/capacity-before <commit>``); this checkout is "after".
Each round runs ``python -m llmload.runner --find-capacity`` once per server
with each code, the two in an order drawn per round (seeded), so that whatever
else the machine does moves both; both read the same model and prompt sets
(``LLMLOAD_MODELS_DIR``, ``LLMLOAD_DATA_DIR`` of this checkout). "after" also gets
``--capacity-ci``. The server ``known`` is the mock with ``--slots`` slots of
``--service-ms`` each (``LLMLOAD_MOCK_SLOTS``; two output tokens, the first after
the service time less one inter-token gap): it holds exactly slots / service
requests/s, the runner test's server of known capacity.

Per search: the time to answer (from the saturation run's start to the last
step's end, from ``cells.jsonl``), the cells and requests it sent, the capacity
and its 95 % interval with the interval's half-width in percent of its centre,
and for ``known`` whether it holds the true capacity. Per server: after / before
of the time, the requests and the half-width, each a ratio of means with a 95 %
interval paired by round (:func:`llmload.core.stats.block_ratio_interval`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.coverage import machine_line
from llmload.core.cliargs import OneLineParser, non_negative_int, positive_float, positive_int, print_error
from llmload.core.paths import DATA_DIR, MODELS_DIR, REPO_ROOT, RESULTS_DIR
from llmload.core.rawlog import read_results
from llmload.core.records import PromptRecord, write_records
from llmload.core.runfiles import RunFolderError, read_capacity, read_cells
from llmload.core.stats import Interval, block_ratio_interval
from llmload.core.tables import render

KNOWN = "known"
CODES = ("before", "after")
#: The inter-token gap of the known server's two tokens (ms).
KNOWN_ITL_MS = 20.0


@dataclass
class Search:
    """One capacity search of one server by one code, in one round."""

    round: int
    server: str
    code: str
    seconds: float | None = None
    process_s: float = 0.0
    cells: int = 0
    requests: int = 0
    capacity: float | None = None
    low: float | None = None
    high: float | None = None
    error: str = ""

    @property
    def half_width_pct(self) -> float | None:
        if self.low is None or self.high is None or self.high + self.low <= 0:
            return None
        return 100.0 * (self.high - self.low) / (self.high + self.low)


def known_capacity(args: argparse.Namespace) -> float:
    return args.slots / (args.service_ms / 1000.0)


def runner_command(args: argparse.Namespace, server: str, code: str, out: Path, data: Path) -> list[str]:
    """The runner's command line of one search."""
    cmd = [sys.executable, "-m", "llmload.runner", "--servers", "mock" if server == KNOWN else server,
           "--tasks", args.tasks, "--modes", args.modes, "--find-capacity", "--slo", args.slo,
           "--slo-target", f"{args.slo_target:g}", "--requests", str(args.requests), "--pool", str(args.pool),
           "--capacity-steps", str(args.capacity_steps), "--capacity-looks", str(args.capacity_looks),
           "--max-lag", f"{args.max_lag:g}", "--arrival", args.arrival, "--cell-timeout", f"{args.cell_timeout:g}",
           "--seed", str(args.seed), "--out", str(out), "--no-report"]
    if args.max_tokens is not None:
        cmd += ["--max-tokens", str(args.max_tokens)]
    if server == KNOWN:
        cmd += ["--data-dir", str(data), "--max-tokens", "2", "--mock-ttft-ms", f"{args.service_ms - KNOWN_ITL_MS:g}",
                "--mock-itl-ms", f"{KNOWN_ITL_MS:g}"]
    if code == "after":
        cmd += ["--capacity-ci", f"{args.ci:g}"]
    return cmd


def measure(out: Path) -> dict:
    """What a finished run folder says of its search: time to answer, cells, requests, capacity, interval."""
    cells = [c for c in read_cells(out) if c.phase == "capacity" and c.started is not None]
    entries = read_capacity(out)
    if not cells or not entries:
        raise RunFolderError(f"{out}: no capacity search was recorded")
    seconds = max(c.started + c.wall_s for c in cells) - min(c.started for c in cells)
    requests = sum(len(read_results(c.files(out).raw_log)) for c in cells if c.files(out).raw_log.is_file())
    entry = entries[-1]
    return {"seconds": seconds, "cells": len(cells), "requests": requests, "capacity": entry.get("capacity_rps"),
            "low": entry.get("ci_low"), "high": entry.get("ci_high")}


def run_search(args: argparse.Namespace, round_: int, server: str, code: str, folder: Path, data: Path) -> Search:
    tree = args.before if code == "before" else REPO_ROOT
    out = folder / f"round{round_}" / f"{server}-{code}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
           "LLMLOAD_MODELS_DIR": str(MODELS_DIR), "LLMLOAD_DATA_DIR": str(DATA_DIR)}
    if server == KNOWN:
        env["LLMLOAD_MOCK_SLOTS"] = str(args.slots)
    cmd = runner_command(args, server, code, out, data)
    print(f"round {round_}, {server}, {code}: $ " + " ".join(cmd[1:]), flush=True)
    started = time.monotonic()
    with (folder / "runner.log").open("a") as log:
        proc = subprocess.run(cmd, env=env, cwd=tree, stdout=log, stderr=subprocess.STDOUT, text=True)
    search = Search(round_, server, code, process_s=time.monotonic() - started)
    try:
        if proc.returncode != 0:
            raise RunFolderError(f"the runner exited with {proc.returncode} (see {folder / 'runner.log'})")
        for key, value in measure(out).items():
            setattr(search, key, value)
    except RunFolderError as exc:
        search.error = str(exc)
    print("   " + (search.error or describe(search, args)), flush=True)
    return search


def describe(s: Search, args: argparse.Namespace) -> str:
    interval = "-" if s.low is None else f"[{s.low:.4g}, {'open' if s.high is None else f'{s.high:.4g}'}]"
    width = "" if s.half_width_pct is None else f" +-{s.half_width_pct:.1f} %"
    capacity = "none held" if s.capacity is None else f"{s.capacity:.4g} req/s"
    return (f"{capacity} {interval}{width} in {s.seconds:.1f} s ({s.cells} cells, {s.requests} requests; "
            f"the process {s.process_s:.1f} s)" + (f"; covers {known_capacity(args):g}: {covers(s, args)}"
                                                   if s.server == KNOWN else ""))


def covers(s: Search, args: argparse.Namespace) -> str:
    if s.low is None:
        return "-"
    truth = known_capacity(args)
    return "yes" if s.low <= truth <= (s.high if s.high is not None else float("inf")) else "no"


def ratio_text(iv: Interval) -> str:
    if iv.value is None:
        return "-"
    return f"{iv.value:.2f}" + (f" [{iv.low:.2f}, {iv.high:.2f}]" if iv.has_interval else "")


def mean_text(values: list[float], digits: int = 1) -> str:
    return f"{sum(values) / len(values):.{digits}f}" if values else "-"


def summary(searches: list[Search], args: argparse.Namespace) -> str:
    """Per server: each code's mean time, requests and half-width, and after / before paired by round."""
    rows = []
    for server in dict.fromkeys(s.server for s in searches):
        by = {code: {s.round: s for s in searches if s.server == server and s.code == code and not s.error}
              for code in CODES}
        figures = {}
        for name, get in (("seconds", lambda s: s.seconds), ("requests", lambda s: s.requests),
                          ("half-width", lambda s: s.half_width_pct)):
            sides = {code: {r: get(s) for r, s in by[code].items() if get(s) is not None} for code in CODES}
            figures[name] = ([mean_text(list(sides[code].values())) for code in CODES]
                             + [ratio_text(block_ratio_interval(sides["after"], sides["before"]))])
        cover = [f"{sum(covers(s, args) == 'yes' for s in by[c].values())}/{len(by[c])}" if server == KNOWN
                 else "-" for c in CODES]
        rows.append([server] + [f"{figures[n][0]} -> {figures[n][1]}" for n in figures]
                    + [figures[n][2] for n in figures] + [" -> ".join(cover)])
    return render(rows, ["server", "time s before -> after", "requests", "+-% of the interval",
                         "time after/before", "requests after/before", "+-% after/before", "covers (known)"])


def write_prompts(folder: Path, n: int = 40) -> Path:
    """The known server's prompt set: short questions (the mock answers two tokens whatever they say)."""
    records = [PromptRecord(id=f"qa-{i}", task="qa", source="benchmark", prompt=f"What is {i} + {i}?",
                            messages=[{"role": "user", "content": f"What is {i} + {i}?"}], max_tokens=16,
                            input_tokens=8) for i in range(n)]
    write_records(folder / "qa.jsonl", records)
    return folder


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m benchmarks.capacity_search",
                      description="The capacity search's time to answer and interval, before and after a change, "
                                  "on the known-capacity mock or real servers, rounds interleaved.")
    p.add_argument("--before", type=Path, default=None, metavar="DIR",
                   help="a checkout of the code before the change (default: none, only this checkout's searches)")
    p.add_argument("--servers", default=KNOWN, metavar="LIST",
                   help=f"comma list: {KNOWN} (the mock of known capacity) or the runner's server names "
                        "(default: %(default)s)")
    p.add_argument("--rounds", type=positive_int, default=3, help="searches per server and code (default: 3)")
    p.add_argument("--ci", type=positive_float, default=3.5, metavar="PCT",
                   help="after's --capacity-ci (default: %(default)s, the before search's usual width on known)")
    p.add_argument("--slots", type=positive_int, default=5, help="known: slots (default: %(default)s)")
    p.add_argument("--service-ms", type=positive_float, default=250.0,
                   help="known: service time of a request, ms (default: %(default)s: 5 / 0.25 s = 20 req/s)")
    p.add_argument("--tasks", default="qa", help="the runner's --tasks (default: %(default)s)")
    p.add_argument("--modes", default="stream", help="the runner's --modes (default: %(default)s)")
    p.add_argument("--slo", default="e2e=400", help="the runner's --slo (default: %(default)s)")
    p.add_argument("--slo-target", type=positive_float, default=90.0, help="(default: %(default)s)")
    p.add_argument("--requests", type=positive_int, default=40, help="(default: %(default)s)")
    p.add_argument("--pool", type=positive_int, default=40, help="(default: %(default)s)")
    p.add_argument("--max-tokens", type=non_negative_int, default=None,
                   help="(default: the runner's; known: 2)")
    p.add_argument("--capacity-steps", type=positive_int, default=6, help="(default: %(default)s)")
    p.add_argument("--capacity-looks", type=positive_int, default=4, help="(default: %(default)s)")
    p.add_argument("--max-lag", type=positive_float, default=100.0, help="ms (default: %(default)s)")
    p.add_argument("--arrival", default="constant", help="(default: %(default)s)")
    p.add_argument("--cell-timeout", type=positive_float, default=300.0, help="s (default: %(default)s)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="the runner's --seed, and the seed of each round's order (default: %(default)s)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the run folders (default: results/capacity-search-<time>)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.before is not None:
        if not (args.before / "llmload" / "runner" / "capacity.py").is_file():
            return print_error(f"--before {args.before} is not a checkout of this suite (no llmload/runner/"
                               "capacity.py)")
        args.before = args.before.resolve()
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    codes = [c for c in CODES if c == "after" or args.before is not None]
    folder = (args.out or RESULTS_DIR / f"capacity-search-{dt.datetime.now():%Y%m%d-%H%M%S}").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    data = write_prompts(folder / "data")
    print(f"machine: {machine_line()}; load average at the start {os.getloadavg()[0]:.1f}", flush=True)
    order = random.Random(args.seed)
    searches: list[Search] = []
    for round_ in range(1, args.rounds + 1):
        for server in servers:
            for code in order.sample(codes, len(codes)):
                searches.append(run_search(args, round_, server, code, folder, data))
    (folder / "searches.json").write_text(json.dumps([{**asdict(s), "half_width_pct": s.half_width_pct}
                                                      for s in searches], indent=1))
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; run folders and searches.json in {folder}\n")
    print(summary(searches, args))
    return 1 if all(s.error for s in searches) else 0


if __name__ == "__main__":
    raise SystemExit(main())
