"""Run folders for the report tests: real ones from the runner against mock servers, and scripted ones."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from llmload.core.calibration import Calibration, Spread
from llmload.core.metrics import SLO, RequestResult
from llmload.core.rawlog import write_results
from llmload.core.runfiles import Cell, append_cell, write_manifest
from llmload.core.sequential import Budget, Look, Trend
from reports.estimates import estimated
from reports.merge import value_columns
from llmload.core.services import ServiceProcess, free_port, local_url
from llmload.runner.capacity import CapacitySearch, search_cells

REPO = Path(__file__).resolve().parents[2]
#: The machine scripted run folders say they ran on (run.json's ``machine``).
TEST_MACHINE = {"cpu": "Test CPU", "cores": 2, "memory_gib": 8.0, "gpus": None, "platform": "test", "python": "3"}


def run_module(module: str, *args: str, timeout: float = 600, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    """``python -m module args`` in the repository (``env``: variables to set on top of this process's)."""
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **env} if env else None)


def run_runner(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = run_module("llmload.runner", *args, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def start_mock(log_dir: Path, ttft_ms: float, itl_ms: float = 10.0) -> tuple[str, ServiceProcess]:
    """A mock-engine server of our own (to be named in ``--servers NAME=URL``)."""
    port = free_port()
    proc = ServiceProcess(f"mock-{port}", [sys.executable, "-m", "server", "--engine", "mock", "--host",
                                           "127.0.0.1", "--port", str(port), "--mock-ttft-ms", str(ttft_ms),
                                           "--mock-itl-ms", str(itl_ms)],
                          local_url(port, "/health"), log_dir / f"mock-{port}.log").start()
    proc.wait_ready(60)
    return local_url(port), proc


def stream_result(i: int, start: float, ttft: float, itl: float = 0.01, tokens: int = 8, task: str = "qa",
                  prompt_id: str | None = None, **kw) -> RequestResult:
    """A scripted stream request: first token after ``ttft`` s, then one every ``itl`` s."""
    offsets = [ttft + k * itl for k in range(tokens)]
    kw.setdefault("output_tokens", tokens)
    kw.setdefault("output_tokens_source", "usage")
    return RequestResult(request_id=f"r{i}", task=task, api="chat", mode="stream", start_time=start,
                         end_offset=offsets[-1] + 0.001, token_offsets=offsets,
                         prompt_id=prompt_id or f"{task}-{i}", status_code=200, **kw)


def closed_loop(ttfts, concurrency: int = 1, itl: float = 0.01, tokens: int = 8, t0: float = 1000.0,
                prompts: int | None = None, **kw) -> list[RequestResult]:
    """Results of a closed loop: ``concurrency`` users, each sending its next request when one ends."""
    free = [t0] * concurrency
    out = []
    for i, ttft in enumerate(ttfts):
        user = int(np.argmin(free))
        r = stream_result(i, free[user], float(ttft), itl, tokens,
                          prompt_id=None if prompts is None else f"{kw.get('task', 'qa')}-{i % prompts}", **kw)
        free[user] = r.start_time + r.token_offsets[-1]
        out.append(r)
    return out


@dataclass
class ScriptedRun:
    """A run folder written by hand: ``add`` cells with their results, then ``close``."""

    path: Path
    manifest: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_manifest(self.path, {"command": "scripted", "model": None, "served_model_name": "test",
                                   "machine": TEST_MACHINE, **self.manifest})

    def add(self, server: str, task: str, mode: str, concurrency: int, results: list[RequestResult],
            rate: float | None = None, repeat: int = 0, phase: str = "matrix", status: str = "ok",
            error: str = "", monitor: list[dict] | None = None, block: int | None = None) -> Cell:
        level = f"r{rate:g}" if rate is not None else f"c{concurrency}"
        prefix = f"{server}/{task}_{mode}_{level}" + (f"_rep{repeat}" if repeat else "") + \
                 (f"_{phase}" if phase != "matrix" else "")
        cell = Cell(server=server, task=task, mode=mode, concurrency=concurrency, prefix=prefix, rate=rate,
                    repeat=repeat, phase=phase, status=status, error=error, block=block)
        if results is not None:
            write_results(cell.files(self.path).raw_log, results)
        if monitor:
            with cell.files(self.path).monitor.open("w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=list(monitor[0]))
                writer.writeheader()
                writer.writerows(monitor)
        append_cell(self.path, cell)
        return cell


def write_calibration(path: Path, servers, machine: dict | None = TEST_MACHINE, sd: float = 0.02, df: float = 30.0,
                      modes=("sync", "stream")) -> Path:
    """A calibration file: run-to-run spread ``sd`` of every estimated figure of ``servers`` (pooled per server and
    mode), measured on ``machine`` (a run folder's: read its run.json when ``machine`` is a folder)."""
    if isinstance(machine, Path):
        machine = json.loads((machine / "run.json").read_text())["machine"]
    figures = {c: Spread(sd, df) for c in value_columns() if estimated(c)}
    spreads = {(server, None, mode, None): dict(figures) for server in servers for mode in modes}
    return Calibration(machine=machine, spreads=spreads, created="2026-12-04").save(path)


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


class FakeOpenAI:
    """A tiny OpenAI-compatible chat server in a thread: words as tokens, ``usage(n)`` as the reported count.

    ``usage`` maps the number of generated tokens to ``completion_tokens`` (None: no usage at all).
    """

    WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog")

    def __init__(self, usage):
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, body: bytes, ctype: str = "application/json"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.startswith("/v1/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]})
                               .encode())
                else:
                    self._send(200, b"{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 8)
                words = [" " + fake.WORDS[i % len(fake.WORDS)] for i in range(n)]
                reported = fake.usage(n)
                usage = None if reported is None else {"prompt_tokens": 5, "completion_tokens": reported,
                                                       "total_tokens": 5 + reported}
                if not body.get("stream"):
                    payload = {"id": "x", "object": "chat.completion", "model": "fake",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": "".join(words)},
                                            "finish_reason": "length"}]}
                    if usage:
                        payload["usage"] = usage
                    self._send(200, json.dumps(payload).encode())
                    return
                events = [{"id": "x", "object": "chat.completion.chunk", "model": "fake",
                           "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
                          for w in words]
                if usage and (body.get("stream_options") or {}).get("include_usage"):
                    events.append({"id": "x", "object": "chat.completion.chunk", "model": "fake", "choices": [],
                                   "usage": usage})
                text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, text.encode(), "text/event-stream")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.usage = usage
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def open_loop(rate: float, n: int, ttft: float, lag: float = 0.001, t0: float = 2000.0, slo_ttft: float | None = None,
              warmup: int = 0, **kw) -> list[RequestResult]:
    """An open loop at ``rate`` req/s: request i due at ``t0 + i / rate``, sent ``lag`` s late.

    The first ``warmup`` requests are warm-up (TTFT 10 s, SLO missed, 1 s late); ``slo_ttft`` sets ``slo_ok``.
    """
    out = []
    for i in range(n + warmup):
        is_warm = i < warmup
        due = t0 + i / rate
        first = 10.0 if is_warm else ttft
        late = 1.0 if is_warm else lag
        r = stream_result(i, due + late, first, prompt_id=f"{kw.get('task', 'qa')}-{i % 16}", **kw)
        r.intended_start, r.warmup = due, is_warm
        if slo_ttft is not None:
            r.slo_ok = (first + late) <= slo_ttft
        out.append(r)
    return out


def monitor_rows(t0: float, seconds: int, running, waiting=None, kv=None, hit=None) -> list[dict]:
    """Monitor CSV rows every 0.5 s with the server-side columns given as functions of the elapsed time."""
    rows = []
    for k in range(seconds * 2):
        t = k * 0.5
        rows.append({"timestamp": t0 + t, "elapsed_s": t, "host_used_mib": 1000.0, "server_rss_mib": 500.0 + t,
                     "server_running": running(t), "server_waiting": "" if waiting is None else waiting(t),
                     "server_kv_cache_pct": "" if kv is None else kv(t),
                     "server_prefix_cache_hit_pct": "" if hit is None else hit(t)})
    return rows


def searched(capacity: float, saturation: float, server: str) -> dict:
    """A capacity.jsonl record of the runner's search on scripted looks: all requests meet the SLO up to
    ``capacity``, half of them beyond; the backlog steady (slope 0 +- 0.05 req/s)."""
    search = CapacitySearch(saturation, 90.0, Budget(steps=6, looks=4))
    steps = search_cells(search, lambda probe: probe, lambda probe, look: look)
    probe = next(steps)
    try:
        while True:
            n = 40 * 2 ** probe.look
            met = n if probe.rate <= capacity else n // 2
            probe = steps.send(Look(n, met, trends=[Trend("backlog", 0.5, 0.0, 0.0, 10, 0.0, 0.05)]))
    except StopIteration:
        pass
    return search.entry(server, "qa", "stream", SLO(ttft=1.0))
