"""Distributed load-generator benchmark: what the master costs per request, and what 1, 2 and 4 workers drive.

Every run is a Locust master and its workers on loopback against the mock
engine with zero delays (every token is due at once), so the client side is
the bottleneck and the master's share shows. Two parts:

master-cost
    A master and one worker send ``--requests`` answers of ``--tokens`` tokens,
    and again five times as many, for each code version: the working tree
    (``after``) and ``--baseline REF`` (``before``: a commit whose workers sent
    every result to the master and asked it for a ticket before every request;
    taken with ``git archive``). Each process's CPU seconds come from the
    kernel: read when the master starts the users, and at its exit
    (``os.wait4``). What one request costs is the difference between the two
    runs' CPU after the spawn, over the difference in requests (start-up and
    shutdown cancel out); the figure is the master's cost per request over the
    worker's, the issue's goal being at most 5 %. The totals of the larger run,
    start-up included, are printed beside it.
throughput
    The working tree with 1, 2 and 4 worker processes (``--workers``), 8 users
    each: the requests per second of the merged run (its summary), and each
    side's CPU. On a small machine the workers, the master and the mock share
    the same cores, so the figures say where this machine stops, not where the
    design does: one master core keeps up with about ``1 / ratio`` workers.

    python -m benchmarks.loadgen_cluster                                  # both parts (about 5 minutes on 2 cores)
    python -m benchmarks.loadgen_cluster --parts master-cost --requests 3000
    python -m benchmarks.loadgen_cluster --parts throughput --workers 1,2,4,8 --out results/cluster
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from llmload.core.cliargs import OneLineParser, choice_list, int_list, positive_int, print_error
from llmload.core.paths import REPO_ROOT
from llmload.core.records import PromptRecord, write_records
from llmload.core.services import ServiceError, free_port
from llmload.core.tables import render
from llmload.targets import Target, TargetSettings, start_target
from llmload.targets.registry import get_kind

from benchmarks.loadgen_capacity import work_folder

PARTS = ("master-cost", "throughput")
#: The last commit whose workers sent every result to the master (and asked it for every ticket).
BASELINE_REF = "ecdc3f9"
#: Users per worker process: enough to keep one process busy against the zero-delay mock.
USERS_PER_WORKER = 8
#: How long one run may take before it is stopped and reported as failed (seconds).
RUN_TIMEOUT_S = 600.0
#: The larger master-cost run sends this many times --requests.
LARGE = 5
#: What the master logs as it starts the users (Locust's own line): the end of start-up.
SPAWNING = "Sending spawn jobs"


class BenchError(RuntimeError):
    """A precondition that stops the benchmark (one line)."""


@dataclass
class Run:
    """One master-and-workers run: its size, each side's CPU seconds, and what the merged summary says."""

    version: str
    workers: int
    requests: int
    master_cpu_s: float = 0.0  # from start to exit
    workers_cpu_s: float = 0.0
    master_startup_cpu_s: float = 0.0  # by the time the master started the users (start-up)
    workers_startup_cpu_s: float = 0.0
    wall_s: float = 0.0
    requests_per_s: float = 0.0
    measured: int = 0  # requests in the master's summary
    error: str = ""


def code_tree(ref: str, work: Path) -> Path:
    """The repository at ``ref`` in a folder of its own (``git archive``); BenchError when git cannot give it."""
    folder = work / f"code-{ref}"
    if folder.is_dir():
        return folder
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", "--format=tar", ref], capture_output=True)
    if archive.returncode != 0:
        raise BenchError(f"cannot take the baseline {ref!r} from git: "
                         f"{archive.stderr.decode(errors='replace').strip().splitlines()[-1:]}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def prompts_file(path: Path, tokens: int) -> Path:
    text = "Tell me something interesting."
    write_records(path, [PromptRecord(id=f"p{i}", task="chat", source="cluster-benchmark", prompt=text,
                                      messages=({"role": "user", "content": text},), max_tokens=tokens,
                                      input_tokens=6) for i in range(64)])
    return path


def wait_cpu(proc: subprocess.Popen, timeout: float) -> tuple[int | None, float]:
    """Wait for ``proc`` to exit; its exit code and the CPU seconds (user + system) the kernel counted for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        time.sleep(0.05)
    proc.kill()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = None
    return None, usage.ru_utime + usage.ru_stime


def exited(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has exited, leaving it to be reaped (its CPU count is read when it is)."""
    return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def cpu_when_spawning(log: Path, procs: list[subprocess.Popen], timeout: float) -> list[float]:
    """Each process's CPU seconds when the master's log says it starts the users (zeros if it never does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not exited(procs[0]):
        if SPAWNING in log.read_text(errors="replace"):
            try:
                return [sum(psutil.Process(p.pid).cpu_times()[:2]) for p in procs]
            except psutil.Error:
                break
        time.sleep(0.02)
    return [0.0] * len(procs)


def run_cluster(version: str, root: Path, url: str, workers: int, requests: int, tokens: int, prompts: Path,
                work: Path) -> Run:
    """A headless master and ``workers`` workers of the code in ``root``, until ``requests`` are done."""
    run = Run(version, workers, requests)
    name = f"{version}-w{workers}-n{requests}"
    port, prefix = free_port(), work / name
    env = {**os.environ, "PYTHONPATH": str(root)}
    locust = [sys.executable, "-m", "locust", "-f", str(root / "locustfiles" / "chat.py"), "-H", url]
    master_cmd = locust + ["--loglevel", "INFO", "--master", "--headless", "--only-summary", "--expect-workers", str(workers),
                           "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
                           "-u", str(USERS_PER_WORKER * workers), "-r", str(USERS_PER_WORKER * workers),
                           "-t", f"{int(RUN_TIMEOUT_S)}s", "--requests", str(requests), "--max-tokens", str(tokens),
                           "--ignore-eos", "--model", "mock", "--dataset", str(prompts), "--csv", str(prefix)]
    worker_cmd = locust + ["--loglevel", "WARNING", "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    logs = [(work / f"{name}-{role}.log").open("w") for role in ["master"] + [f"w{i}" for i in range(workers)]]
    started = time.monotonic()
    try:
        master = subprocess.Popen(master_cmd, cwd=root, env=env, stdout=logs[0], stderr=subprocess.STDOUT)
        procs = [subprocess.Popen(worker_cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
                 for log in logs[1:]]
        startup = cpu_when_spawning(Path(logs[0].name), [master, *procs], RUN_TIMEOUT_S)
        run.master_startup_cpu_s, run.workers_startup_cpu_s = startup[0], sum(startup[1:])
        code, run.master_cpu_s = wait_cpu(master, RUN_TIMEOUT_S)
        run.wall_s = time.monotonic() - started
        codes = []
        for proc in procs:
            worker_code, cpu = wait_cpu(proc, 60.0)
            codes.append(worker_code)
            run.workers_cpu_s += cpu
    finally:
        for log in logs:
            log.close()
    if code is None:
        run.error = f"the master did not finish within {RUN_TIMEOUT_S:.0f} s (see {logs[0].name})"
    elif code not in (0, 1) or any(c != 0 for c in codes):
        run.error = f"exit codes: master {code}, workers {codes} (see {work / name}-*.log)"
    try:
        summary = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]
    except (OSError, ValueError, KeyError) as exc:
        run.error = run.error or f"no summary ({exc})"
        return run
    run.requests_per_s, run.measured = summary["request_throughput"], summary["requests"]
    if summary.get("failures"):
        run.error = run.error or f"{summary['failures']} request(s) failed"
    return run


@dataclass
class Cost:
    """What one request costs each side of one version (CPU microseconds), from two runs of different sizes."""

    version: str
    master_us: float
    worker_us: float
    totals_ratio: float  # master / worker CPU over the whole larger run, start-up included

    @property
    def ratio(self) -> float:
        return self.master_us / self.worker_us if self.worker_us > 0 else float("nan")


def cost(small: Run, large: Run) -> Cost:
    extra = large.requests - small.requests

    def running(run: Run) -> tuple[float, float]:  # CPU seconds after start-up
        return run.master_cpu_s - run.master_startup_cpu_s, run.workers_cpu_s - run.workers_startup_cpu_s

    (small_master, small_workers), (large_master, large_workers) = running(small), running(large)
    return Cost(small.version, 1e6 * (large_master - small_master) / extra,
                1e6 * (large_workers - small_workers) / extra,
                large.master_cpu_s / large.workers_cpu_s if large.workers_cpu_s else float("nan"))


def runs_table(runs: list[Run]) -> str:
    return render([(r.version, r.workers, r.requests, f"{r.master_cpu_s:.2f}", f"{r.workers_cpu_s:.2f}",
                    f"{r.wall_s:.1f}", f"{r.requests_per_s:,.0f}",
                    f"{100 * r.master_cpu_s / r.wall_s:.0f}" if r.wall_s else None,
                    f"{100 * r.workers_cpu_s / r.wall_s:.0f}" if r.wall_s else None, r.error)
                   for r in runs],
                  ["version", "workers", "requests", "master CPU s", "workers CPU s", "wall s", "req/s",
                   "master CPU%", "workers CPU%", "error"], fmt="simple")


def cost_table(costs: list[Cost]) -> str:
    return render([(c.version, f"{c.master_us:.1f}", f"{c.worker_us:.1f}", f"{100 * c.ratio:.1f}",
                    f"{100 * c.totals_ratio:.1f}", f"{1 / c.ratio:.0f}" if c.ratio > 0 else None) for c in costs],
                  ["version", "master µs/request", "worker µs/request", "master/worker %", "totals %",
                   "workers per master core"], fmt="simple")


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m benchmarks.loadgen_cluster", description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", type=choice_list(PARTS, "parts"), default=list(PARTS),
                   help="what to run (default: master-cost,throughput)")
    p.add_argument("--requests", type=positive_int, default=3000,
                   help="master-cost: the smaller run's requests (the larger one sends five times as many; default: "
                        "%(default)s); throughput: requests per run")
    p.add_argument("--tokens", type=positive_int, default=4, help="answer length in tokens (default: %(default)s)")
    p.add_argument("--workers", type=int_list, default=[1, 2, 4],
                   help="throughput: worker processes per run (default: 1,2,4)")
    p.add_argument("--baseline", default=BASELINE_REF,
                   help="master-cost: the git commit measured as 'before' (default: %(default)s, the last one whose "
                        "workers sent every result to the master; 'none' skips it)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the runs' logs, raw logs and summary.json (default: a temporary folder)")
    return p


def run_parts(args: argparse.Namespace, work: Path) -> tuple[list[Run], list[Cost]]:
    """Every run of the selected parts against one zero-delay mock; the runs and each version's cost."""
    runs: list[Run] = []
    costs: list[Cost] = []
    versions = [("after", REPO_ROOT)]
    if "master-cost" in args.parts and args.baseline != "none":
        versions.insert(0, ("before", code_tree(args.baseline, work)))
    prompts = prompts_file(work / "prompts.jsonl", args.tokens)
    server = start_target(Target("mock", "mock"), get_kind("mock"),
                          TargetSettings(mock_ttft_ms=0.0, mock_itl_ms=0.0, start_timeout=60.0),
                          work / "mock.log", progress=False)
    try:
        if "master-cost" in args.parts:
            for version, root in versions:
                pair = []
                for size in (args.requests, LARGE * args.requests):
                    print(f"== master-cost, {version}: 1 worker, {size} requests", file=sys.stderr, flush=True)
                    pair.append(run_cluster(version, root, server.base_url, 1, size, args.tokens, prompts, work))
                runs += pair
                if not any(r.error for r in pair):
                    costs.append(cost(*pair))
        if "throughput" in args.parts:
            for workers in args.workers:
                print(f"== throughput: {workers} worker(s), {args.requests} requests", file=sys.stderr, flush=True)
                runs.append(run_cluster("after", REPO_ROOT, server.base_url, workers, args.requests, args.tokens,
                                        prompts, work))
    finally:
        server.stop()
    return runs, costs


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with work_folder(args.out, "cluster-bench-") as work:
        try:
            runs, costs = run_parts(args, work)
        except (BenchError, ServiceError) as exc:
            return print_error(str(exc).splitlines()[0], 2 if isinstance(exc, BenchError) else 1)
        if args.out is not None:
            (work / "summary.json").write_text(json.dumps(
                {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                 "runs": [asdict(r) for r in runs], "costs": [{**asdict(c), "ratio": c.ratio} for c in costs]},
                indent=2))
    print(f"master and workers on loopback, {os.cpu_count()} CPU cores shared with the zero-delay mock; "
          f"{args.tokens}-token answers, {USERS_PER_WORKER} users per worker")
    print(f"\nruns:\n{runs_table(runs)}")
    if costs:
        print(f"\nper request (the difference between the two master-cost runs of each version):\n{cost_table(costs)}")
        for c in costs:
            print(f"{c.version}: the master spends {100 * c.ratio:.1f} % of a worker's CPU per request; one master "
                  f"core keeps up with about {1 / c.ratio:.0f} worker processes" if c.ratio > 0 else
                  f"{c.version}: the master's cost per request is below what this run can resolve")
    return 0 if all(not r.error for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
