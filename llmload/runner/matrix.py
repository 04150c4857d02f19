"""The run: every level, sweep and capacity search of every server as jobs, run in a fair order; then the report.

For each server, task and mode the runner makes one job per load level
(``--concurrency``, ``--rates``: its ``--repeat`` repeats, or with
``--target-ci`` as many as its headline intervals need, :mod:`.convergence`)
and, with ``--sweep`` or ``--find-capacity``, one job that runs the saturation
run (a closed loop at ``--pool`` users) and then starts the sweep's levels and
the capacity search (:mod:`.capacity`). :mod:`.schedule` orders their cells
(interleaved blocks by default), :mod:`.servers` starts and stops the servers
they need, :mod:`.cell` runs each cell. At the end the run folder is merged
into ``report/`` (also after an interrupt, with what was measured).
"""

from __future__ import annotations

import datetime as dt
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from llmload.core.model_store import ModelNotAvailable, is_default_model, resolve_model, served_model_name
from llmload.core.paths import RESULTS_DIR, dataset_path
from llmload.core.points import Point
from llmload.core.otlp import SpanReceiver
from llmload.core.runfiles import SPANS, Cell, append_capacity, append_cell, write_manifest
from llmload.core.sequential import Budget, Throughput, prefetch_scipy_stats, saturation_throughput
from llmload.loadgen.options import TRACE_SHAPING
from llmload.runner.capacity import CapacitySearch, look_of, search_cells
from llmload.runner.cell import CellResult, CellRunner, LoadOptions
from llmload.runner.convergence import HEADLINE, MIN_REPEATS, converged, half_widths, widths_text
from llmload.runner.interrupts import Interrupted, StopSignal
from llmload.runner.manifest import git_commit, machine, versions
from llmload.runner.options import RunnerSettings
from llmload.runner.plan import Plan
from llmload.runner.progress import Progress, cell_label, figures
from llmload.runner.schedule import Job, Order
from llmload.runner.servers import RESERVE_GIB, ServerPool
from llmload.targets import RunningTarget, Target, TargetSettings, get_kind
from llmload.tasks import DatasetError, ensure_datasets
from monitors.sampler import peak_usage, read_monitor
from reports.merge import merge_run
from server.engines.hf_model import check_local_model


#: Seconds the runner waits after a cell for the spans of its requests from a server that traces.
SPAN_WAIT_S = 10.0


class RunnerError(RuntimeError):
    """A setting or precondition that stops the run before it starts (one clear line)."""


def load_options(s: RunnerSettings) -> LoadOptions:
    return LoadOptions(api=s.api, requests=s.requests, max_tokens=s.max_tokens, warmup=s.warmup, arrival=s.arrival,
                       burstiness=s.burstiness, seed=s.seed, slo=s.slo, cell_timeout=s.cell_timeout,
                       cancel_rate=s.cancel_rate, cancel_after=s.cancel_after, retry=s.retry,
                       retry_max_wait=s.retry_max_wait, max_error_rate=s.max_error_rate, trace=trace_options(s))


def trace_options(s: RunnerSettings) -> tuple[tuple[str, object], ...]:
    """The load generator's options of a trace cell (:class:`LoadSettings` field, value): the trace, its window
    and scale, the model's tokenizer and context (prompts built to the lengths in the served model's tokens)."""
    if not s.trace:
        return ()
    # the shaping's defaults too: no LOCUST_LLM_* variable reaches the cell instead (no --trace-format: "")
    return (("trace", str(Path(s.trace).resolve())), *((name, getattr(s, name)) for name in TRACE_SHAPING),
            ("max_model_len", s.target.max_model_len), ("seed", s.seed),
            *((("tokenizer", s.target.model),) if not is_default_model(s.target.model) else ()))


class Runner:
    """Runs the matrix for resolved settings (:func:`llmload.runner.options.resolve`); ``run()`` -> exit code."""

    def __init__(self, settings: RunnerSettings, stop: StopSignal | None = None):
        self.options = settings
        self.targets: list[Target] = list(settings.servers)
        self.kinds = {t.name: get_kind(t.kind) for t in self.targets}
        self.plan = Plan.from_settings(settings)
        self.stop = stop or StopSignal()
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(settings.out or RESULTS_DIR / stamp)
        self.settings = TargetSettings()
        self.model_path: str | None = None
        self.datasets: dict[str, Path] = {}
        self.cells: CellRunner | None = None
        self.progress = Progress(self.plan.cells_per_server() * len(self.targets), len(self.targets))
        self.pool: ServerPool | None = None
        self.spans: SpanReceiver | None = None  # --otel-receiver
        self.order = Order(settings.order, settings.order_seed)
        self.memory: dict = {}
        self.sequence: list[dict] = []  # the cells in the order they ran (run.json)
        self.convergence: list[dict] = []  # --target-ci: each level's outcome (run.json)
        self.info: dict = {}
        self.recorded = 0
        self.recorded_servers: set[str] = set()
        self.failed_any = False
        self.halted = False

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Materialise the model and build missing prompt sets (the model only when a server needs one)."""
        args = self.options
        needs_model = any(self.kinds[t.name].needs_model and not t.url and not self.kinds[t.name].external
                          for t in self.targets)
        try:
            self.model_path = resolve_model(args.target.model) if needs_model else args.target.model
            if needs_model:
                check_local_model(self.model_path)
        except (ModelNotAvailable, FileNotFoundError) as exc:
            raise RunnerError(f"model: {exc}") from None
        self.settings = replace(args.target, model=self.model_path,
                                served_model_name=served_model_name(args.target.model))
        if args.otel_receiver:
            self.spans = SpanReceiver(fallback=self.run_dir / SPANS)
            self.settings = replace(self.settings, otlp_traces_endpoint=self.spans.start())
        paths = {task: dataset_path(task, args.data_dir) for task in self.plan.tasks}
        if not self.plan.needs_datasets:
            self.datasets = {}  # only the trace's level: it brings its own prompts
        elif args.data_dir is not None and all(p.is_file() for p in paths.values()):
            self.datasets = paths  # the user's own prompt sets, used as they are
        else:
            try:
                self.datasets = ensure_datasets(list(self.plan.tasks), data_dir=args.data_dir, model=self.model_path,
                                                max_model_len=args.target.max_model_len)
            except DatasetError as exc:
                raise RunnerError(f"prompt sets: {exc}") from None
        self.cells = CellRunner(self.run_dir, load_options(args), self.datasets, self.stop)
        self.cells.start_spare()  # the first cell's Locust, ready while the servers start
        self.pool = ServerPool(self.targets, self.kinds, self.settings, self.run_dir, self.stop, self.progress,
                               args.max_servers_up)
        fit, need, room = self.pool.all_fit()
        self.order = Order(args.order, args.order_seed, grouped=self.order.interleaved and not fit)
        self.memory = {"estimated_gib": {t.name: round(self.pool.need_gib(t.name), 2) for t in self.targets},
                       "available_gib": round(room + RESERVE_GIB, 1), "reserve_gib": RESERVE_GIB, "all_up": fit}

    def manifest(self) -> dict:
        args = self.options
        return {
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python -m llmload.runner"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "settings": args.record(),
            "servers": [{**asdict(t), "prefix_caching": self.kinds[t.name].prefix_caching} for t in self.targets],
            "baseline": args.baseline,
            "slo": args.slo.to_dict() if args.slo else None, "slo_target": args.slo_target,
            "plan": {**asdict(self.plan), "cells": self.progress.total},
            "model": self.model_path, "served_model_name": self.settings.served_model_name,
            "datasets": {t: str(p) for t, p in self.datasets.items()},
            "versions": versions(), "machine": machine(), "git_commit": git_commit(),
        }

    def write_manifest(self) -> None:
        """``run.json`` with the order so far: the cells run, and each level's --target-ci outcome."""
        order = {**asdict(self.order), "description": self.order.describe(), "max_servers_up": self.options.max_servers_up,
                 "memory": self.memory, "server_starts": self.pool.starts if self.pool else 0, "cells": self.sequence}
        info = {**self.info, "order": order}
        if self.plan.target_ci is not None:
            info["target_ci"] = {"pct": self.plan.target_ci, "headline": HEADLINE, "min_repeats":
                                 max(self.plan.repeat, MIN_REPEATS), "max_repeats": self.plan.max_repeats,
                                 "levels": self.convergence}
        write_manifest(self.run_dir, info)

    def header(self) -> str:
        p = self.plan
        levels = len(p.concurrency) + len(p.rates)
        repeats = (f" x {max(p.repeat, MIN_REPEATS)}-{p.max_repeats} repeats (until +-{p.target_ci:g} %)"
                   if p.target_ci is not None
                   else f" x {p.repeat} repeats" if p.repeat > 1 else "")
        fit = self.memory.get("all_up")
        started = [t.name for t in self.targets if self.pool and self.pool.started_here(t.name)]
        servers = ("" if len(started) < 2 else
                   f"; servers kept up together (about {sum(self.memory['estimated_gib'].values()):.1f} GiB of "
                   f"{self.memory['available_gib']:.1f} GiB available)" if fit else
                   "; servers started in turn, as memory allows")
        return (f"run folder: {self.run_dir}\nmatrix: {len(self.targets)} server(s) x {len(p.tasks)} task(s) x "
                f"{len(p.modes)} mode(s) x {levels} level(s){repeats}"
                + (f" + trace {self.options.trace} (under {p.tasks[0]})" if p.trace else "")
                + (" + saturation run" if p.searches else "")
                + (f" + {p.sweep}-rate sweep" if p.sweep else "")
                + (f" + capacity search (at most {p.capacity_steps} steps of {p.capacity_looks} looks)"
                   if p.find_capacity else "")
                + f" = {self.progress.total} cells"
                + (" at most" if p.find_capacity or p.target_ci is not None else "")
                + f"\norder: {self.order.describe()}{servers}")

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        interrupted: Interrupted | None = None
        started = time.monotonic()
        try:
            self.prepare()
            self.info = self.manifest()
            self.write_manifest()
            print(self.header(), flush=True)
            self.run_jobs(self.jobs())
        except Interrupted as exc:
            interrupted = exc
        finally:
            if self.cells is not None:
                self.cells.close()
            if self.pool is not None:
                self.pool.stop_all()
            if self.spans is not None:
                self.spans.stop()  # after the servers: their last spans come as they stop
            if self.info:
                with self.stop.deferred():
                    self.write_manifest()
        code = 1 if self.failed_any and self.options.on_error == "stop" else 0
        with self.stop.deferred():
            if self.recorded and not self.options.no_report:
                code = max(code, self.report())
        if interrupted is None and self.stop.requested:  # arrived while the report was being made
            interrupted = Interrupted(self.stop.signum)
        if interrupted is not None:
            where = f"partial results in {self.run_dir}" if self.recorded else "no cell had started"
            print(f"interrupted by {interrupted.name} after {time.monotonic() - started:.0f}s: Locust stopped, then "
                  f"the server; {where}", file=sys.stderr, flush=True)
            return interrupted.exit_code
        return code

    def report(self) -> int:
        """Merge the run folder into ``report/``; 0, or 1 when the merge failed (the measurements stay)."""
        baseline = self.options.baseline if self.options.baseline in self.recorded_servers else None  # None: run.json's
        try:
            path = merge_run(self.run_dir, baseline=baseline)
        except Exception as exc:  # noqa: BLE001 - the run's files are kept; say why and how to retry
            print(f"report failed: {type(exc).__name__}: {exc} (retry: python -m reports.merge {self.run_dir})",
                  file=sys.stderr, flush=True)
            return 1
        print(f"report: {path}", flush=True)
        return 0

    # ------------------------------------------------------------------ the jobs

    def jobs(self) -> list[Job]:
        """Every server's jobs, in the sequential order (server, task, mode; levels, then the searches)."""
        plan = self.plan
        out = []
        for target in self.targets:
            for task, mode in plan.pairs():
                out += [self.level_job(point) for point in plan.points(target.name, task, mode)]
                if plan.searches:
                    out.append(Job(target.name, self.search_steps(target.name, task, mode), plan.search_cells()))
        return out

    def level_job(self, point: Point) -> Job:
        return Job(point.server, self.level_steps(point), self.plan.max_repeats)

    def level_steps(self, point: Point):
        """A level's repeats; with --target-ci they stop once its headline intervals are narrow enough."""
        plan = self.plan
        cells: list[Cell] = []
        for k in range(plan.max_repeats):
            cell = plan.cell(point, k)
            yield cell
            cells.append(cell)
            if plan.target_ci is not None and k + 1 >= max(plan.repeat, MIN_REPEATS):
                ok = [c for c in cells if c.status == "ok"]
                widths = half_widths(self.run_dir, ok) if len(ok) >= MIN_REPEATS else {}
                done = converged(widths, plan.target_ci)
                if done or k + 1 == plan.max_repeats:
                    self.convergence.append({**point.record(), "repeats": len(cells), "converged": done,
                                             "half_widths": widths})
                    print(f"   {cell_label(cell)}: " + ("converged" if done else "at its cap")
                          + f" after {len(cells)} repeats ({widths_text(widths) or 'no repeat measured'}; "
                            f"target +-{plan.target_ci:g} %)", flush=True)
                    return None
        return None

    def search_steps(self, server: str, task: str, mode: str):
        """The saturation run; then the sweep's levels and the capacity search, as new jobs."""
        plan = self.plan
        cell = plan.saturation_cell(server, task, mode)
        if plan.find_capacity:
            prefetch_scipy_stats()  # the search's tests need it; imported while the saturation run runs
        result: CellResult = yield cell
        saturation = (result.summary.request_throughput
                      if result.summary is not None and cell.status == "ok" else 0.0)
        if saturation <= 0:
            print(f"   {server} {task} {mode}: no saturation throughput measured, so no sweep or capacity search",
                  flush=True)
            return []
        jobs = [self.level_job(p) for p in plan.sweep_points(server, task, mode, saturation)] if plan.sweep else []
        if plan.find_capacity:
            start = saturation_throughput(result.results)
            jobs.append(Job(server, self.capacity_steps(server, task, mode, saturation, start), plan.capacity_cells))
        return jobs

    def capacity_steps(self, server: str, task: str, mode: str, saturation: float, start: Throughput | None):
        """The capacity search's cells, from the saturation run's throughput; the search (finished or not) is
        appended to ``capacity.jsonl``."""
        plan, args = self.plan, self.options
        search = CapacitySearch(saturation, args.slo_target, Budget(plan.capacity_steps, plan.capacity_looks),
                                args.max_lag * 1000.0, args.capacity_ci, args.requests, args.warmup, start)
        try:
            yield from search_cells(
                search, lambda probe: plan.step_cell(server, task, mode, probe.rate, probe.look, probe.requests),
                lambda cell, result: look_of(cell, result.results, result.summary, self.run_dir))
        finally:
            with self.stop.deferred():
                append_capacity(self.run_dir, search.entry(server, task, mode, args.slo))
                print(f"   capacity {server} {task} {mode} under {args.slo.describe()} at {args.slo_target:g} %: "
                      f"{search.describe()}", flush=True)
        return []

    # ------------------------------------------------------------------ running them

    def run_jobs(self, jobs: list[Job]) -> None:
        """Run blocks of the jobs' cells in :attr:`order` until every job has ended (or the run halts)."""
        active: list[Job] = []
        try:
            for job in jobs:
                job.start()
                active.append(job)
            number = 0
            while active and not self.halted:
                number += 1
                self.progress.expect_starts(self.expected_starts(active))
                for job in self.order.block(active, number):
                    self.stop.check()
                    if self.halted:
                        return
                    self.run_job(job, number if self.order.interleaved else None, active)
                self.release_idle(active)
        finally:
            with self.stop.deferred():
                for job in active:
                    job.close()

    def run_job(self, job: Job, block: int | None, active: list[Job]) -> None:
        """Run the job's pending cell, hand it its result, and put what follows it into ``active``."""
        cell = job.pending
        assert cell is not None and self.pool is not None
        cell.block = block
        running = self.pool.get(cell.server)
        if running is None:
            self.skip(cell, self.pool.gone[cell.server])
            job.close()
            self.progress.shrink(job.planned - 1)
            active.remove(job)
            return
        result = self.run_cell(cell, running)
        if result is None:
            return
        children = job.advance(result)
        if children is None:
            return
        self.progress.shrink(job.planned - sum(child.planned for child in children))
        for child in children:
            child.start()
        at = active.index(job)
        active[at:at + 1] = children if not self.order.interleaved else []
        if self.order.interleaved:
            active.extend(children)

    def expected_starts(self, active: list[Job]) -> int:
        """Server start-ups still to come: each server not yet up once, or (grouped blocks) once a block."""
        assert self.pool is not None
        servers = {job.server for job in active if job.server not in self.pool.gone}
        waiting = [s for s in servers if s not in self.pool.up and self.pool.started_here(s)]
        if not self.order.grouped:
            return len(waiting)
        return max((job.planned for job in active), default=0) * len(servers)

    def release_idle(self, active: list[Job]) -> None:
        """Stop the servers no job needs any more."""
        assert self.pool is not None
        busy = {job.server for job in active}
        for name in [n for n in self.pool.up if n not in busy]:
            self.pool.stop_server(name)

    def record(self, cell: Cell) -> None:
        append_cell(self.run_dir, cell)
        self.recorded += 1
        self.recorded_servers.add(cell.server)

    def skip(self, cell: Cell, why: str) -> None:
        """Record a cell of a server that is gone as skipped."""
        self.failed_any = True
        cell.status, cell.error = "skipped", why
        self.record(cell)
        label = f"{self.progress.counter()} {cell_label(cell, self.plan.max_repeats)}"
        self.progress.cell_done(None)
        print(f"{label}: skipped ({why}); {self.progress.left_text()}", flush=True)
        if self.options.on_error == "stop":
            self.halted = True

    def run_cell(self, cell: Cell, running: RunningTarget) -> CellResult | None:
        """Run one cell and print its progress line; None when the run halted before it."""
        self.stop.check()
        if self.halted:
            return None
        assert self.cells is not None and self.pool is not None, "prepare() first"
        label = f"{self.progress.counter()} {cell_label(cell, self.plan.max_repeats)}: "
        cell.order, cell.started = len(self.sequence) + 1, time.time()
        if self.spans is not None:
            self.spans.route(cell.files(self.run_dir).spans)
        result = self.cells.run(cell, running, label, last=self.progress.done + 1 >= self.progress.total)
        if self.spans is not None:
            self.collect_spans(cell, running, result)
        self.recorded += 1
        self.recorded_servers.add(cell.server)
        if cell.status == "ok" and not running.alive():
            cell.status, cell.error = "failed", "server died during the cell"
            append_cell(self.run_dir, cell)
        self.note(cell)
        self.progress.cell_done(cell.wall_s)
        print(f"{figures(cell, result.summary, self.options.throughput_only)}; {self.progress.left_text()}", flush=True)
        if cell.status == "failed":
            self.failed_any = True
            if self.options.on_error == "stop":
                self.halted = True
        self.stop.check()
        return result

    def collect_spans(self, cell: Cell, running: RunningTarget, result: CellResult) -> None:
        """Wait (at most :data:`SPAN_WAIT_S`) for the spans of the cell's successful requests from a server that
        traces; then spans go to the run's own spans.jsonl until the next cell."""
        assert self.spans is not None
        if running.process is not None and running.kind.traces(self.settings):
            missing = self.spans.wait_for({r.request_id for r in result.results if r.success}, SPAN_WAIT_S)
            if missing:
                print(f"   {cell.server}: the spans of {len(missing)} request(s) did not come within {SPAN_WAIT_S:g} s",
                      flush=True)
        self.spans.route(None)

    def note(self, cell: Cell) -> None:
        """Add the cell to the order in ``run.json``, and its server's measured memory to the pool."""
        self.sequence.append({"order": cell.order, "block": cell.block, "prefix": cell.prefix,
                              "started": dt.datetime.fromtimestamp(cell.started or 0).isoformat(timespec="seconds"),
                              "wall_s": round(cell.wall_s, 2), "status": cell.status})
        monitor = cell.files(self.run_dir).monitor
        if monitor.is_file() and self.pool is not None:
            try:
                self.pool.note_peak(cell.server, peak_usage(read_monitor(monitor)).get("peak_server_rss_mib"))
            except ValueError:
                pass
        with self.stop.deferred():
            self.write_manifest()
