"""Server benchmark: naive vs batched vs vLLM, side by side, on the same model, prompts and output length.

For each server in turn (never two at once: they would share the CPU), it
starts the server from the target registry (:func:`llmload.targets.start_target`),
sends one warm-up request, then for each concurrency level runs a closed loop:
``C`` users (gevent greenlets), each sending its next streamed request as soon
as the previous one ends, until ``C x --requests-per-user`` requests are done.
Requests go through the suite's own client (:class:`llmload.core.client.LLMClient`
over geventhttpclient, as the Locust users send them), so a token, a usage
count and a failure mean here what they mean in the load tests. Every request
asks for exactly ``--output-tokens`` tokens (``ignore_eos``), so all servers
produce the same work, and every prompt of the benchmark is unique (see
:meth:`Workload.record`). Every figure comes from
:func:`llmload.core.metrics.summarize`; the table prints output tokens/s and
TTFT p50 per server and level, the baseline's figure over each server's
(:func:`llmload.core.metrics.ratio`: ``vllm / server``), and the peak RSS of
the server's whole process tree during the level (the resource monitor samples
it): with a large ``--requests-per-user`` this is the long-run memory check,
since a server that leaks grows from level to level.

    python -m benchmarks.server_throughput                      # 1, 8, 32 users (tens of minutes on 2 cores)
    python -m benchmarks.server_throughput --concurrency 1,8 --requests-per-user 2 --output-tokens 32
    python -m benchmarks.server_throughput --servers naive,batched --out results/bench
    python -m benchmarks.server_throughput --servers batched-plain,batched,vllm --concurrency 8   # what packing brings

Measured figures: docs/benchmarks.md and docs/engines.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import gevent
from geventhttpclient.client import HTTPClientPool

from llmload.core.cliargs import (CLIError, OneLineParser, add_options, from_namespace, int_list, positive_float,
                                  positive_int, print_error)
from llmload.core.client import LLMClient
from llmload.core.defaults import REQUEST_TIMEOUT_S
from llmload.core.apis import APIS, GenerationParams
from llmload.core.metrics import RequestResult, RunSummary, ratio, summarize
from llmload.core.model_store import ModelNotAvailable, resolve_model, served_model_name
from llmload.core.rawlog import write_results
from llmload.core.records import PromptRecord, RecordFormatError, read_records
from llmload.core.services import ServiceError
from llmload.core.tables import render
from llmload.core.transport import HTTPTransport, TransportError
from llmload.core.wire import WireError
from llmload.targets import (ServerSelection, Target, TargetSettings, choose_servers, get_kind, start_target)
from monitors.sampler import peak_usage, read_monitor, start_monitor

#: The server options' defaults that differ from the runner's (:class:`TargetSettings`): one batch cap for batched
#: and vLLM alike, so that both may hold as many requests at once.
SERVER_DEFAULTS = {"max_num_seqs": 32}

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
    api: str = "chat"  # or "responses" (the same messages as input), "completion" (the prompt text)

    @property
    def params(self) -> GenerationParams:
        """Streamed, greedy, exactly ``output_tokens`` tokens, in the workload's API."""
        return GenerationParams(api=self.api, mode="stream", max_tokens=self.output_tokens, ignore_eos=True,
                                temperature=0.0)

    def record(self, index: int) -> PromptRecord:
        """The prompt of the ``index``-th request: prompts cycled, the last message (and the completion
        prompt) tagged ``[index]``.

        No two requests are the same (levels and servers number their requests
        on from one another): vLLM's prefix cache would otherwise skip the
        whole prefill of a repeated prompt. It still reuses the chat template's
        shared beginning, as it would in production.
        """
        record = self.prompts[index % len(self.prompts)]
        *earlier, last = record.messages
        return replace(record, prompt=f"[{index}] {record.prompt}",
                       messages=(*earlier, {**last, "content": f"[{index}] {last['content']}"}))


# --------------------------------------------------------------------------- the client


def client_pool(concurrency: int, timeout: float) -> HTTPClientPool:
    """A geventhttpclient pool with one keep-alive connection per user."""
    return HTTPClientPool(concurrency=concurrency, network_timeout=timeout, connection_timeout=min(timeout, 30.0))


def run_level(url: str, workload: Workload, concurrency: int, requests: int, timeout: float,
              first_index: int = 0) -> list[RequestResult]:
    """A closed loop of ``concurrency`` users until ``requests`` requests are done; their raw results.

    Requests are numbered from ``first_index`` (see :meth:`Workload.record`).
    """
    pool = client_pool(concurrency, timeout)
    transport = HTTPTransport(url, pool)
    indices = iter(range(first_index, first_index + requests))  # shared by the greenlets, which never race on it
    results: list[RequestResult] = []

    def user(worker: int) -> None:
        client = LLMClient(transport, workload.params, task="bench", timeout=timeout, worker=f"user-{worker}")
        for index in indices:
            results.append(client.generate(workload.record(index), workload.model))

    try:
        gevent.joinall([gevent.spawn(user, w) for w in range(concurrency)], raise_error=True)
    finally:
        pool.close()
    return results


def served_model(url: str, timeout: float) -> str:
    """The model id ``url`` serves (the first it lists at ``/v1/models``)."""
    pool = client_pool(1, timeout)
    try:
        return LLMClient(HTTPTransport(url, pool), GenerationParams(), task="bench", timeout=timeout).list_first_model()
    finally:
        pool.close()


# --------------------------------------------------------------------------- the servers


@dataclass
class LevelResult:
    """One server at one concurrency level: its summary, or why there is none."""

    server: str
    concurrency: int
    summary: RunSummary | None = None
    error: str = ""
    peak_rss_mib: float | None = None  # the server's whole process tree, sampled during the level


def bench_server(target: Target, args: argparse.Namespace, prompts: tuple[PromptRecord, ...],
                 settings: TargetSettings, out_dir: Path | None, log_dir: Path, first_index: int = 0
                 ) -> list[LevelResult]:
    """Start ``target``, warm it up, run every level, stop it."""
    name = target.name
    print(f"== {name}: starting", file=sys.stderr, flush=True)
    try:
        running = start_target(target, get_kind(target.kind), settings, log_dir / f"{name}.log")
        workload = Workload(prompts, args.output_tokens, served_model(running.base_url, args.timeout), args.api)
    except (ServiceError, TransportError, WireError) as exc:
        message = str(exc).splitlines()[0]
        print(f"   {name} did not start: {message}", file=sys.stderr)
        return [LevelResult(name, c, error=f"did not start: {message}") for c in args.concurrency]
    levels = []
    try:
        (warm,) = run_level(running.base_url, workload, 1, 1, args.timeout, first_index=-1 - first_index)
        if not warm.success:
            print(f"   warm-up request failed: {warm.error}", file=sys.stderr)
        index = first_index
        for concurrency in args.concurrency:
            requests = concurrency * args.requests_per_user
            print(f"   {name}: {concurrency} users, {requests} requests", file=sys.stderr, flush=True)
            monitor_csv = log_dir / f"{name}-c{concurrency}_monitor.csv"
            with start_monitor(monitor_csv, server_pid=running.pid, interval=0.5):
                results = run_level(running.base_url, workload, concurrency, requests, args.timeout, index)
            index += requests
            if out_dir is not None:
                write_results(out_dir / f"{name}-c{concurrency}.jsonl", results)
            summary = summarize(results)
            errors = sorted({r.error for r in results if not r.success})
            peak_rss = peak_usage(read_monitor(monitor_csv))["peak_server_rss_mib"]
            levels.append(LevelResult(name, concurrency, summary, "; ".join(errors)[:200], peak_rss))
            print(f"   {name}: {summary.output_token_throughput:.1f} tok/s, TTFT p50 "
                  f"{_fmt(summary.get('ttft', 'p50'), 's')}, {summary.failures} failed, server RSS peak "
                  f"{_fmt(peak_rss, ' MiB', 0)}", file=sys.stderr, flush=True)
    finally:
        running.stop()
    return levels


# --------------------------------------------------------------------------- the table


def _fmt(value: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def comparison_rows(levels: list[LevelResult], baseline: str | None, order: list[str] | None = None) -> list[dict]:
    """One row per (level, server): throughput, TTFT p50 and the baseline's over them (baseline / server)."""
    order = order or list(dict.fromkeys(level.server for level in levels))
    base = {lv.concurrency: lv.summary for lv in levels if lv.server == baseline and lv.summary}
    rows = []
    for lv in sorted(levels, key=lambda lv: (lv.concurrency, order.index(lv.server))):
        s, b = lv.summary, base.get(lv.concurrency)
        tput = s.output_token_throughput if s and s.requests > s.failures else None
        ttft = s.get("ttft", "p50") if s else None
        base_tput = b.output_token_throughput if b and b.requests > b.failures else None
        rows.append({
            "concurrency": lv.concurrency, "server": lv.server,
            "requests": s.requests if s else 0, "failures": s.failures if s else 0,
            "output_tokens_per_s": tput, "ttft_p50_s": ttft,
            "throughput_ratio": ratio(base_tput, tput),  # baseline / server
            "ttft_ratio": ratio(b.get("ttft", "p50") if b else None, ttft),  # baseline / server
            "peak_rss_mib": lv.peak_rss_mib,
            "error": lv.error,
        })
    return rows


def render_table(rows: list[dict], baseline: str | None) -> str:
    """The side-by-side table: one line per level and server."""
    over = f"{baseline or 'baseline'} / server"
    headers = ["users", "server", "reqs", "fail", "tok/s", over, "TTFT p50", over, "RSS MiB", "error"]
    body = [[str(r["concurrency"]), r["server"], str(r["requests"]), str(r["failures"]),
             _fmt(r["output_tokens_per_s"], "", 1), _fmt(r["throughput_ratio"]), _fmt(r["ttft_p50_s"], "s"),
             _fmt(r["ttft_ratio"]), _fmt(r["peak_rss_mib"], "", 0), r["error"] or ""] for r in rows]
    if not any(r["error"] for r in rows):
        headers, body = headers[:-1], [line[:-1] for line in body]
    return render(body, headers, fmt="simple")


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m benchmarks.server_throughput",
                      description="Output tokens/s and TTFT p50 of naive, batched and vLLM side by side.")
    add_options(p, ServerSelection)  # --servers, --baseline: declared once, as the runner has them
    p.add_argument("--concurrency", type=int_list, default=[1, 8, 32], metavar="LIST",
                   help="comma-separated concurrency levels (default: 1,8,32)")
    p.add_argument("--requests-per-user", type=positive_int, default=2, metavar="N",
                   help="requests per level = concurrency x this (default: %(default)s)")
    p.add_argument("--output-tokens", type=positive_int, default=64, metavar="N",
                   help="tokens every request generates (ignore_eos; default: %(default)s)")
    p.add_argument("--api", choices=APIS, default="chat",
                   help="API every request uses: chat, completion or responses (/v1/responses) (default: %(default)s)")
    p.add_argument("--prompts", type=Path, default=None,
                   help="JSONL prompt records (llmload.core.records) to use instead of the built-in prompts")
    add_options(p, TargetSettings, defaults=SERVER_DEFAULTS)
    p.add_argument("--timeout", type=positive_float, default=REQUEST_TIMEOUT_S, metavar="S",
                   help="seconds one request may take (default: %(default)s)")
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
    try:
        targets, baseline = choose_servers(args.servers, args.baseline)
    except CLIError as exc:
        parser.error(str(exc))
    names = [t.name for t in targets]
    needs_model = any(get_kind(t.kind).needs_model and not t.url for t in targets)
    try:
        prompts = load_prompts(args.prompts)
        model_path = resolve_model(args.model) if needs_model else args.model
    except (BenchError, ModelNotAvailable) as exc:
        return print_error(str(exc))
    settings = from_namespace(TargetSettings, args, model=model_path, served_model_name=served_model_name(args.model))
    out_dir = args.out
    log_dir = out_dir or Path("results") / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)

    levels: list[LevelResult] = []
    per_server = sum(c * args.requests_per_user for c in args.concurrency)
    for k, target in enumerate(targets):
        levels += bench_server(target, args, prompts, settings, out_dir, log_dir, first_index=k * per_server)
    rows = comparison_rows(levels, baseline, names)
    print(f"\n{len(prompts)} prompts, {args.output_tokens} output tokens each (ignore_eos), "
          f"{args.requests_per_user} requests per user, {args.dtype}, batch cap {args.max_num_seqs}, "
          f"basic-server threads {args.threads or 'one per core'}; ratios {baseline or 'none'} / server; "
          f"server logs in {log_dir}")
    print(render_table(rows, baseline))
    if out_dir is not None:
        settings_json = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "servers"}
        (out_dir / "summary.json").write_text(json.dumps(
            {"settings": {**settings_json, "servers": [asdict(t) for t in targets], "baseline": baseline},
             "rows": rows, "summaries": [{"server": lv.server, "concurrency": lv.concurrency,
                                          "summary": asdict(lv.summary) if lv.summary else None} for lv in levels]},
            indent=2))
    return 0 if all(lv.summary and lv.summary.failures == 0 for lv in levels) else 1


if __name__ == "__main__":
    raise SystemExit(main())
