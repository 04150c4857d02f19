"""Soak benchmark: one Locust process through a million requests, its memory, its web UI's cost, its sketches' error.

Against the basic server's mock engine with zero delays (every answer at
once, so the run is as dense as one client can make it), one Locust process
with its web UI on runs ``--requests`` requests. Every ``--poll-s`` seconds the
benchmark polls the web UI as a browser does (``/stats/requests``, which
carries the LLM tab's table, and ``/llmload/live.json``), timing each poll,
and reads the Locust process's RSS; it prints one line per 100 k requests.
At the end it compares the live figures (DDSketch quantiles, in
``<prefix>_summary.json``) with the exact ones computed from the raw log.

    python -m benchmarks.soak                                  # 1,000,000 requests (about 15 min on 2 cores)
    python -m benchmarks.soak --requests 200000 --out results/soak
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from llmload.core.cliargs import OneLineParser, positive_float, positive_int, print_error
from llmload.core.metrics import METRICS, summarize
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import iter_results
from llmload.core.records import PromptRecord, write_records
from llmload.core.services import ServiceError, free_port, local_url
from llmload.core.tables import render
from llmload.targets import Target, TargetSettings, get_kind, start_target
from llmload.tasks import get_task

STEP = 100_000


def prompts(path: Path, count: int = 64) -> Path:
    records = [PromptRecord(id=f"soak-{i}", task="chat", source="soak", prompt=f"Say something, {i}.",
                            messages=({"role": "user", "content": f"Say something, {i}."},), max_tokens=1,
                            input_tokens=4) for i in range(count)]
    write_records(path, records)
    return path


class LineCounter:
    """Lines of a growing file, counted in the bytes added since the last call."""

    def __init__(self, path: Path):
        self.path, self.offset, self.lines = path, 0, 0

    def count(self) -> int:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                while block := handle.read(1 << 20):
                    self.lines += block.count(b"\n")
                    self.offset += len(block)
        except FileNotFoundError:
            pass
        return self.lines


def get(url: str, timeout: float = 30.0) -> tuple[bytes, float]:
    """The body of ``url`` and the seconds the request took."""
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = response.read()
    return body, time.perf_counter() - started


def run(args: argparse.Namespace, work: Path) -> int:
    kind = get_kind("mock")
    settings = TargetSettings(mock_ttft_ms=0.0, mock_itl_ms=0.0)
    server = start_target(Target("mock", "mock"), kind, settings, work / "server.log")
    web_port = free_port()
    web = local_url(web_port)
    prefix = work / "soak"
    command = [sys.executable, "-m", "locust", "-f", str(get_task("chat").locustfile),
               "-H", server.base_url, "--web-host", "127.0.0.1", "--web-port", str(web_port), "--autostart",
               "--autoquit", "0", "-u", str(args.users), "-r", str(args.users), "--requests", str(args.requests),
               "--max-tokens", str(args.tokens), "--ignore-eos", "--model", "mock", "--mode", "stream",
               "--dataset", str(prompts(work / "prompts.jsonl")), "--csv", str(prefix), "--only-summary",
               "--loglevel", "WARNING"]
    print(f"soak: {args.requests:,} requests, {args.users} users, {args.tokens}-token answers; mock at "
          f"{server.base_url}, web UI at {web}", file=sys.stderr, flush=True)
    rows, polls = [], []
    started = time.monotonic()
    with (work / "locust.log").open("w") as log:
        locust = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    try:
        client = psutil.Process(locust.pid)
        counter = LineCounter(Path(f"{prefix}_requests.jsonl"))
        next_step = STEP
        finished_at = None
        while locust.poll() is None:
            time.sleep(args.poll_s)
            try:
                _, stats_s = get(f"{web}/stats/requests")
                _, live_s = get(f"{web}/llmload/live.json")
                rss = client.memory_info().rss / 2**20
            except (OSError, psutil.Error):
                continue  # starting, or stopping
            done = counter.count()
            polls.append((done, stats_s * 1000, live_s * 1000, rss))
            if done >= args.requests and finished_at is None:
                finished_at = time.monotonic()
            while done >= next_step:
                rows.append((f"{next_step:,}", f"{rss:,.0f}", f"{stats_s * 1000:.1f}", f"{live_s * 1000:.1f}",
                             f"{time.monotonic() - started:,.0f}"))
                print(f"   {next_step:,} requests: client RSS {rss:,.0f} MiB, poll {stats_s * 1000:.1f} ms + "
                      f"{live_s * 1000:.1f} ms", file=sys.stderr, flush=True)
                next_step += STEP
        locust.wait(timeout=600)
        exited_at = time.monotonic()
    finally:
        if locust.poll() is None:
            locust.kill()
        server.stop()
    wall = exited_at - started
    print(f"\nsoak: one Locust process, web UI on, {args.requests:,} requests in {wall:,.0f} s "
          f"({args.requests / wall:,.0f} req/s); exit code {locust.returncode}"
          + (f"; shutdown took {exited_at - finished_at:.1f} s after the last request" if finished_at else ""))
    print(render(rows, ["requests", "client RSS MiB", "/stats/requests ms", "/llmload/live.json ms", "elapsed s"]))
    if polls:
        early = [p for p in polls if p[0] < STEP] or polls[:1]
        late = [p for p in polls if p[0] >= max(p[0] for p in polls) - STEP]
        print(f"poll time: {sum(p[1] for p in early) / len(early):.1f} ms at under {STEP:,} requests, "
              f"{sum(p[1] for p in late) / len(late):.1f} ms at the end (/stats/requests, mean)")
    return compare_with_exact(prefix)


def compare_with_exact(prefix: Path) -> int:
    """The live sketch quantiles against the exact ones from the raw log."""
    raw = Path(f"{prefix}_requests.jsonl")
    live = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]
    started = time.monotonic()
    exact = summarize(iter_results(raw)).flat()
    took = time.monotonic() - started
    rows, worst = [], 0.0
    for metric in METRICS:
        for stat in metric.stats:
            column = metric.column(stat)
            if stat == "mean" or exact.get(column) is None or live.get(column) is None:
                continue
            error = abs(live[column] / exact[column] - 1) * 100 if exact[column] else 0.0
            worst = max(worst, error)
            rows.append((column, f"{exact[column] * metric.scale:.3f}", f"{live[column] * metric.scale:.3f}",
                         f"{error:.2f}"))
    print(f"\nlive sketch vs exact (raw log, {exact['requests']:,} requests read in {took:.0f} s; "
          f"{raw.stat().st_size / 2**20:,.0f} MiB):")
    print(render(rows, ["figure", "exact", "sketch", "error %"]))
    print(f"largest relative error: {worst:.2f} % (DDSketch's bound: 1 %)")
    return 0 if exact["requests"] == live["requests"] else 1


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=positive_int, default=1_000_000, help="requests in all (default: 1,000,000)")
    p.add_argument("--users", type=positive_int, default=32, help="Locust users (default: %(default)s)")
    p.add_argument("--tokens", type=positive_int, default=1, help="tokens per answer (default: %(default)s)")
    p.add_argument("--poll-s", type=positive_float, default=2.0,
                   help="seconds between web UI polls (default: 2, as the UI polls; Locust caches its stats for 2 s)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the raw log, Locust's CSVs and logs (default: a temporary folder, removed)")
    args = p.parse_args(argv)
    temporary = None if args.out else tempfile.TemporaryDirectory(prefix="soak-")
    work = Path(args.out or temporary.name)
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run(args, work)
    except ServiceError as exc:
        return print_error(str(exc).splitlines()[0], 1)
    finally:
        if temporary is not None:
            temporary.cleanup()


if __name__ == "__main__":
    raise SystemExit(main())
