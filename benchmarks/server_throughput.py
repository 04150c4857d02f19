"""Server benchmark: naive vs batched vs vLLM, side by side, on the same model, prompts and output length.

For each server in turn (never two at once: they would share the CPU), it
starts the server, sends one warm-up request, then for each concurrency level
runs a closed loop: ``C`` client threads, each sending its next streamed
request as soon as the previous one ends, until ``C x --requests-per-user``
requests are done. Every request asks for exactly ``--output-tokens`` tokens
(``ignore_eos``), so all servers produce the same work, and every prompt is
unique (see :meth:`Workload.body`). Raw timings become
:class:`llmload.core.metrics.RequestResult` rows and every figure comes from
:func:`llmload.core.metrics.summarize`; the table prints output tokens/s and TTFT
p50 per server and level, with their ratios to vLLM, and the peak RSS of the
server's whole process tree during the level (the resource monitor samples it):
with a large ``--requests-per-user`` this is the long-run memory check, since a
server that leaks grows from level to level.

    python -m benchmarks.server_throughput                      # 1, 8, 32 users (tens of minutes on 2 cores)
    python -m benchmarks.server_throughput --concurrency 1,8 --requests-per-user 2 --output-tokens 32
    python -m benchmarks.server_throughput --servers naive,batched --out results/bench
    python -m benchmarks.server_throughput --servers batched-plain,batched,vllm --concurrency 8   # what packing brings

The goal the table checks: at 8 and 32 users, batched reaches at least half of
vLLM's token throughput with a TTFT p50 at most twice vLLM's. On a shared
machine the figures are noisy: compare runs made at the same time.

Threads: vLLM on a small CPU runs its model on one OpenMP thread and leaves
the other core to its HTTP front end; the basic servers get the same
(``--threads 1``) by default. With one thread per core instead
(``--threads 0``) the batched engine's steps stall whenever another process
takes a core (see ``server/engines/batched.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks.cli import choice_list, int_list, positive_int
from llmload.core.wire import (
    ENDPOINTS,
    GenerationParams,
    Outcome,
    StreamReader,
    WireError,
    build_body,
    encode_body,
    http_error_message,
)
from llmload.core.metrics import RequestResult, RunSummary, summarize
from llmload.core.rawlog import write_results
from llmload.core.records import PromptRecord, RecordFormatError, read_records
from llmload.core.services import ServiceError, ServiceProcess, free_port
from llmload.targets.basic import basic_server_command
from monitors.sampler import peak_usage, read_monitor, start_monitor

SERVERS = ("naive", "batched-plain", "batched", "vllm")
#: What runs by default; ``batched-plain`` (batched with its weights left unpacked) is there to measure the packing.
DEFAULT_SERVERS = ("naive", "batched", "vllm")
#: Flags of the basic server per benchmark server kind (besides the shared ones).
BASIC_SERVERS = {"naive": ("naive", []), "batched": ("batched", []),
                 "batched-plain": ("batched", ["--no-prepack-weights"])}
BASELINE = "vllm"
GOAL_LEVELS = (8, 32)
GOAL_THROUGHPUT_RATIO = 0.5  # batched / vLLM output tokens/s, at least
GOAL_TTFT_RATIO = 2.0  # batched / vLLM TTFT p50, at most

#: Built-in prompts (used when no --prompts file is given): varied lengths, one chat turn each.
DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain, step by step, how a refrigerator keeps food cold, for a curious twelve-year-old.",
    "Summarise the following text in three sentences: The printing press, developed in the fifteenth century, "
    "made books far cheaper to produce. Literacy spread, ideas travelled faster across Europe, and scholars "
    "could compare identical copies of the same text. Within decades, printed pamphlets shaped religious and "
    "political debates, and the modern newspaper followed.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and two tests.",
    "List five tips for staying focused while studying, with one sentence on each.",
    "Translate into French: The weather is lovely today, so we will have lunch in the garden.",
    "Compare cats and dogs as pets in a short paragraph.",
)


class BenchError(RuntimeError):
    """A setting that stops the benchmark before it starts (one clear line)."""


@dataclass(frozen=True)
class Workload:
    """What every server is asked to do: the same prompts, API and output length."""

    prompts: tuple[PromptRecord, ...]
    output_tokens: int
    model: str  # the id sent as ``model``

    def body(self, index: int) -> dict:
        """The request body of the ``index``-th request: chat, streamed, greedy, fixed length.

        Prompts are cycled, and each request's last message starts with its number
        (``[17] ...``), so no two requests are the same: vLLM's prefix cache would
        otherwise skip the whole prefill of a repeated prompt. It still reuses the
        chat template's shared beginning, as it would in production.
        """
        params = GenerationParams(api="chat", mode="stream", max_tokens=self.output_tokens, ignore_eos=True,
                                  temperature=0.0)
        record = self.prompts[index % len(self.prompts)]
        *earlier, last = record.messages
        unique = replace(record, messages=(*earlier, {**last, "content": f"[{index}] {last['content']}"}))
        return build_body(unique, params, self.model)


# --------------------------------------------------------------------------- the client


def send_streamed(url: str, body: dict, request_id: str, timeout: float) -> RequestResult:
    """Send one streamed chat request and record its raw timings; failures come back as data.

    The lines are interpreted by the suite's own wire format
    (:class:`llmload.core.wire.StreamReader`), so a token chunk, the usage
    count and a broken stream mean here exactly what they mean in the Locust suite.
    """
    request = urllib.request.Request(url + ENDPOINTS["chat"], data=encode_body(body),
                                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    reader = StreamReader("chat")
    status = 0
    start_time = time.time()
    t0 = time.perf_counter()
    end = t0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
            for line in response:
                end = time.perf_counter()
                if reader.feed(line, end - t0):
                    break
            else:
                reader.end()
        outcome = reader.outcome()
    except urllib.error.HTTPError as exc:
        status = exc.code
        outcome = Outcome(error=http_error_message(exc.code, exc.read()))
    except WireError as exc:
        outcome = reader.outcome()
        outcome.error = str(exc)
    except (OSError, ValueError) as exc:  # refused, reset, timed out, bad URL
        end = time.perf_counter()
        outcome = reader.outcome()
        outcome.error = f"{type(exc).__name__}: {exc}"
    return RequestResult(request_id=request_id, task="bench", api="chat", mode="stream", start_time=start_time,
                         end_offset=end - t0, token_offsets=outcome.token_offsets,
                         output_tokens=outcome.output_tokens, output_tokens_source=outcome.output_tokens_source,
                         prompt_tokens=outcome.prompt_tokens, success=outcome.success, status_code=status,
                         error=outcome.error, output_chars=outcome.output_chars)


def run_level(url: str, workload: Workload, concurrency: int, requests: int, timeout: float) -> list[RequestResult]:
    """A closed loop of ``concurrency`` users until ``requests`` requests are done; their raw results."""
    results: list[RequestResult] = []
    lock = threading.Lock()
    next_index = iter(range(requests))

    def user(worker: int) -> None:
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            result = send_streamed(url, workload.body(index), f"bench-{uuid.uuid4().hex[:12]}", timeout)
            result.worker, result.prompt_id = f"user-{worker}", workload.prompts[index % len(workload.prompts)].id
            with lock:
                results.append(result)

    threads = [threading.Thread(target=user, args=(w,), daemon=True) for w in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# --------------------------------------------------------------------------- the servers


def start_server(kind: str, args: argparse.Namespace, model_path: str, served_name: str,
                 log_path: Path) -> tuple[ServiceProcess, str]:
    """Start one server on a free port and wait until it is healthy; return it and its base URL."""
    port = free_port()
    if kind == "vllm":
        from server.vllm_launcher import VLLMSettings, start_vllm

        settings = VLLMSettings(model=model_path, served_model_name=served_name, port=port,
                                max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                                kv_cache_gib=args.kv_cache_gib, dtype=args.dtype)
        return start_vllm(settings, log_path, timeout=args.vllm_timeout), f"http://127.0.0.1:{port}"
    extra = ["--served-model-name", served_name, "--max-model-len", str(args.max_model_len), "--log-level", "warning",
             "--dtype", args.dtype]
    engine, flags = BASIC_SERVERS[kind]
    extra += flags
    if engine == "batched":
        extra += ["--max-num-seqs", str(args.max_num_seqs)]
    if args.threads:
        extra += ["--threads", str(args.threads)]
    proc = ServiceProcess(f"basic server ({kind})", basic_server_command(engine, port, model=model_path, extra=extra),
                          f"http://127.0.0.1:{port}/health", log_path)
    proc.start()
    proc.wait_ready(300, progress=True)
    return proc, f"http://127.0.0.1:{port}"


@dataclass
class Cell:
    """One server at one concurrency level: its summary, or why there is none."""

    server: str
    concurrency: int
    summary: RunSummary | None = None
    error: str = ""
    peak_rss_mib: float | None = None  # the server's whole process tree, sampled during the level


def bench_server(kind: str, args: argparse.Namespace, workload: Workload, model_path: str,
                 out_dir: Path | None, log_dir: Path) -> list[Cell]:
    """Start ``kind``, warm it up, run every level, stop it."""
    print(f"== {kind}: starting", file=sys.stderr, flush=True)
    try:
        proc, url = start_server(kind, args, model_path, workload.model, log_dir / f"{kind}.log")
    except (ServiceError, RuntimeError) as exc:
        message = str(exc).splitlines()[0]
        print(f"   {kind} did not start: {message}", file=sys.stderr)
        return [Cell(kind, c, error=f"did not start: {message}") for c in args.concurrency]
    cells = []
    try:
        warm = send_streamed(url, workload.body(0), "warmup", args.timeout)
        if not warm.success:
            print(f"   warm-up request failed: {warm.error}", file=sys.stderr)
        for concurrency in args.concurrency:
            requests = concurrency * args.requests_per_user
            print(f"   {kind}: {concurrency} users, {requests} requests", file=sys.stderr, flush=True)
            monitor_csv = log_dir / f"{kind}-c{concurrency}_monitor.csv"
            with start_monitor(monitor_csv, server_pid=proc.pid, interval=0.5):
                results = run_level(url, workload, concurrency, requests, args.timeout)
            if out_dir is not None:
                write_results(out_dir / f"{kind}-c{concurrency}.jsonl", results)
            summary = summarize(results)
            errors = sorted({r.error for r in results if not r.success})
            peak_rss = peak_usage(read_monitor(monitor_csv))["peak_server_rss_mib"]
            cells.append(Cell(kind, concurrency, summary, "; ".join(errors)[:200], peak_rss))
            print(f"   {kind}: {summary.output_token_throughput:.1f} tok/s, TTFT p50 "
                  f"{_fmt(summary.get('ttft', 'p50'), 's')}, {summary.failures} failed, server RSS peak "
                  f"{_fmt(peak_rss, ' MiB', 0)}", file=sys.stderr, flush=True)
    finally:
        proc.stop()
    return cells


# --------------------------------------------------------------------------- the table


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def comparison_rows(cells: list[Cell]) -> list[dict]:
    """One row per (level, server): throughput, TTFT p50 and their ratios to vLLM at that level."""
    base = {c.concurrency: c.summary for c in cells if c.server == BASELINE and c.summary}
    rows = []
    for cell in sorted(cells, key=lambda c: (c.concurrency, SERVERS.index(c.server))):
        s, b = cell.summary, base.get(cell.concurrency)
        tput = s.output_token_throughput if s and s.requests > s.failures else None
        ttft = s.get("ttft", "p50") if s else None
        rows.append({
            "concurrency": cell.concurrency, "server": cell.server,
            "requests": s.requests if s else 0, "failures": s.failures if s else 0,
            "output_tokens_per_s": tput, "ttft_p50_s": ttft,
            "throughput_vs_vllm": _ratio(tput, b.output_token_throughput if b else None),
            "ttft_vs_vllm": _ratio(ttft, b.get("ttft", "p50") if b else None),
            "peak_rss_mib": cell.peak_rss_mib,
            "error": cell.error,
        })
    return rows


def render_table(rows: list[dict]) -> str:
    """The side-by-side table: one line per level and server."""
    header = (f"{'users':>5}  {'server':<13} {'reqs':>4} {'fail':>4} {'tok/s':>8} {'x vLLM':>7} "
              f"{'TTFT p50':>9} {'x vLLM':>7} {'RSS MiB':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['concurrency']:>5}  {r['server']:<13} {r['requests']:>4} {r['failures']:>4} "
                     f"{_fmt(r['output_tokens_per_s'], '', 1):>8} {_fmt(r['throughput_vs_vllm']):>7} "
                     f"{_fmt(r['ttft_p50_s'], 's'):>9} {_fmt(r['ttft_vs_vllm']):>7} "
                     f"{_fmt(r['peak_rss_mib'], '', 0):>8}"
                     + (f"  ({r['error']})" if r["error"] else ""))
    return "\n".join(lines)


def goal_verdicts(rows: list[dict]) -> list[str]:
    """The issue's goal, checked at each goal level that was measured for batched and vLLM."""
    servers = {r["server"] for r in rows}
    if not {"batched", BASELINE} <= servers:
        ran = ", ".join(sorted(servers))
        return [f"goal not checked: it compares batched with {BASELINE}, and --servers ran {ran}"]
    verdicts = []
    for r in rows:
        if r["server"] != "batched" or r["concurrency"] not in GOAL_LEVELS:
            continue
        t, p = r["throughput_vs_vllm"], r["ttft_vs_vllm"]
        if t is None or p is None:
            verdicts.append(f"{r['concurrency']} users: not comparable (batched or {BASELINE} failed at this level)")
            continue
        ok = t >= GOAL_THROUGHPUT_RATIO and p <= GOAL_TTFT_RATIO
        verdicts.append(f"{r['concurrency']} users: batched at {t:.2f}x vLLM's tokens/s (goal >= "
                        f"{GOAL_THROUGHPUT_RATIO}), TTFT {p:.2f}x (goal <= {GOAL_TTFT_RATIO}): "
                        f"{'met' if ok else 'NOT met'}")
    return verdicts


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_throughput",
                                description="Output tokens/s and TTFT p50 of naive, batched and vLLM side by side.")
    p.add_argument("--servers", type=choice_list(SERVERS, "--servers"), default=list(DEFAULT_SERVERS),
                   help=f"comma-separated servers to run, in this order, among {', '.join(SERVERS)} (default: "
                        f"{','.join(DEFAULT_SERVERS)}; batched-plain = batched with --no-prepack-weights)")
    p.add_argument("--concurrency", type=int_list, default=[1, 8, 32],
                   help="comma-separated concurrency levels (default: 1,8,32)")
    p.add_argument("--requests-per-user", type=positive_int, default=2,
                   help="requests per level = concurrency x this (default: %(default)s)")
    p.add_argument("--output-tokens", type=positive_int, default=64,
                   help="tokens every request generates (ignore_eos; default: %(default)s)")
    p.add_argument("--prompts", type=Path, default=None,
                   help="JSONL prompt records (llmload.core.records) to use instead of the built-in prompts")
    p.add_argument("--model", default=None, help="model folder or id (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--max-model-len", type=positive_int, default=2048,
                   help="context limit of every server (default: %(default)s)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="weights dtype of every server, so that all do the same arithmetic (default: %(default)s, "
                        "as the runner; vLLM alone would pick bfloat16 on CPU)")
    p.add_argument("--max-num-seqs", type=positive_int, default=32,
                   help="batch cap of batched and vLLM alike (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads of naive and batched; 0: torch's default, one per core (default: 1, as vLLM "
                        "on a 2-core CPU: one compute thread, one core left for the HTTP side)")
    p.add_argument("--kv-cache-gib", type=float, default=4.0, help="vLLM on CPU: KV cache GiB (default: %(default)s)")
    p.add_argument("--vllm-timeout", type=float, default=600.0, help="seconds to wait for vLLM to start (default: 600)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one request may take (default: 900)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder for raw per-request JSONL, the table (summary.json) and server logs")
    return p


def load_prompts(path: Path | None) -> tuple[PromptRecord, ...]:
    """The prompts: a prompt-record file, or the built-in prompts as one-turn chat records."""
    if path is None:
        return tuple(PromptRecord(id=f"builtin-{i}", task="chat", source="builtin", prompt=text,
                                  messages=({"role": "user", "content": text},), max_tokens=0, input_tokens=0)
                     for i, text in enumerate(DEFAULT_PROMPTS))
    try:
        records = read_records(path)
    except (OSError, RecordFormatError) as exc:
        raise BenchError(f"cannot read prompts from {path}: {exc}") from None
    if not records:
        raise BenchError(f"{path} holds no prompt records")
    return tuple(records)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.threads < 0:
        parser.error(f"--threads must be 0 or more, got {args.threads}")
    from llmload.core.model_store import DEFAULT_MODEL_NAME, ModelNotAvailable, resolve_model

    try:
        prompts = load_prompts(args.prompts)
        model_path = resolve_model(args.model)
    except (BenchError, ModelNotAvailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    served = DEFAULT_MODEL_NAME if args.model is None else Path(model_path).name
    workload = Workload(prompts, args.output_tokens, served)
    out_dir = args.out
    log_dir = out_dir or Path("results") / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)

    cells: list[Cell] = []
    for kind in args.servers:
        cells += bench_server(kind, args, workload, model_path, out_dir, log_dir)
    rows = comparison_rows(cells)
    print(f"\n{len(prompts)} prompts, {args.output_tokens} output tokens each (ignore_eos), "
          f"{args.requests_per_user} requests per user, {args.dtype}, batch cap {args.max_num_seqs}, "
          f"basic-server threads {args.threads or 'one per core'}; server logs in {log_dir}")
    print(render_table(rows))
    for verdict in goal_verdicts(rows):
        print(verdict)
    if out_dir is not None:
        (out_dir / "summary.json").write_text(json.dumps(
            {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
             "rows": rows, "summaries": [{"server": c.server, "concurrency": c.concurrency,
                                          "summary": asdict(c.summary) if c.summary else None} for c in cells]},
            indent=2))
    return 0 if all(c.summary and c.summary.failures == 0 for c in cells) else 1


if __name__ == "__main__":
    raise SystemExit(main())
