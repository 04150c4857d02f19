"""The matrix loop: for each server, start it, run its cells (levels, sweeps, capacity searches), stop it; report.

Each server is started through :func:`llmload.targets.start_target` and
measured alone. For each task and mode the runner runs the fixed cells
(``--concurrency`` levels, ``--rates``, each ``--repeat`` times), then, with
``--sweep`` or ``--find-capacity``, a saturation run (a closed loop at
``--pool`` users) whose request throughput sets the sweep's rates and where
the capacity search starts (:mod:`llmload.runner.capacity`). At the end the
run folder is merged into ``report/`` (also after an interrupt, with what was
measured).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path

from llmload.core.model_store import ModelNotAvailable, resolve_model, served_model_name
from llmload.core.paths import RESULTS_DIR, dataset_path
from llmload.core.runfiles import Cell, append_capacity, append_cell, write_manifest
from llmload.core.services import ServiceError
from llmload.runner.capacity import CapacitySearch, Step
from llmload.runner.cell import CellResult, CellRunner, LoadOptions
from llmload.runner.interrupts import Interrupted, StopSignal
from llmload.runner.manifest import git_commit, machine, versions
from llmload.runner.plan import Plan, sweep_rates
from llmload.runner.progress import Progress, cell_label, figures
from llmload.targets import RunningTarget, Target, TargetSettings, get_kind, start_target
from llmload.tasks import DatasetError, ensure_datasets
from reports.merge import merge_run
from server.engines.hf_model import check_local_model


class RunnerError(RuntimeError):
    """A setting or precondition that stops the run before it starts (one clear line)."""


def load_options(args: argparse.Namespace) -> LoadOptions:
    return LoadOptions(api=args.api, requests=args.requests, max_tokens=args.max_tokens, warmup=args.warmup,
                       arrival=args.arrival, burstiness=args.burstiness, seed=args.seed, slo=args.slo,
                       cell_timeout=args.cell_timeout)


class Runner:
    """Runs the matrix for resolved arguments (:func:`llmload.runner.options.resolve`); ``run()`` -> exit code."""

    def __init__(self, args: argparse.Namespace, stop: StopSignal | None = None, flags: frozenset[str] | None = None):
        self.args = args
        self.targets: list[Target] = list(args.servers)
        self.kinds = {t.name: get_kind(t.kind) for t in self.targets}
        self.plan = Plan.from_args(args)
        self.stop = stop or StopSignal()
        self.flags = flags
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        self.run_dir = Path(args.out or RESULTS_DIR / stamp)
        self.settings = TargetSettings()
        self.model_path: str | None = None
        self.datasets: dict[str, Path] = {}
        self.cells: CellRunner | None = None
        self.current: RunningTarget | None = None
        self.progress = Progress(self.plan.cells_per_server() * len(self.targets), len(self.targets))
        self.recorded = 0
        self.recorded_servers: set[str] = set()
        self.failed_any = False
        self.halted = False

    # ------------------------------------------------------------------ set-up

    def prepare(self) -> None:
        """Materialise the model and build missing prompt sets (the model only when a server needs one)."""
        args = self.args
        needs_model = any(self.kinds[t.name].needs_model and not t.url and not self.kinds[t.name].external
                          for t in self.targets)
        try:
            self.model_path = resolve_model(args.model) if needs_model else args.model
            if needs_model:
                check_local_model(self.model_path)
        except (ModelNotAvailable, FileNotFoundError) as exc:
            raise RunnerError(f"model: {exc}") from None
        self.settings = TargetSettings(
            model=self.model_path, served_model_name=served_model_name(args.model),
            max_model_len=args.max_model_len, dtype=args.dtype, threads=args.threads,
            max_num_seqs=args.max_num_seqs, kv_cache_gib=args.kv_cache_gib, mock_ttft_ms=args.mock_ttft_ms,
            mock_itl_ms=args.mock_itl_ms, start_timeout=args.start_timeout, vllm_start_timeout=args.vllm_timeout)
        paths = {task: dataset_path(task, args.data_dir) for task in self.plan.tasks}
        if args.data_dir is not None and all(p.is_file() for p in paths.values()):
            self.datasets = paths  # the user's own prompt sets, used as they are
        else:
            try:
                self.datasets = ensure_datasets(list(self.plan.tasks), data_dir=args.data_dir, model=self.model_path,
                                                max_model_len=args.max_model_len)
            except DatasetError as exc:
                raise RunnerError(f"prompt sets: {exc}") from None
        self.cells = CellRunner(self.run_dir, load_options(args), self.datasets, self.stop, self.flags)

    def manifest(self) -> dict:
        args = self.args
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k not in ("servers", "slo")}
        return {
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "command": " ".join(["python -m llmload.runner"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "settings": settings,
            "servers": [{**asdict(t), "prefix_caching": self.kinds[t.name].prefix_caching} for t in self.targets],
            "baseline": args.baseline,
            "slo": args.slo.to_dict() if args.slo else None, "slo_target": args.slo_target,
            "plan": {**asdict(self.plan), "cells": self.progress.total},
            "model": self.model_path, "served_model_name": self.settings.served_model_name,
            "datasets": {t: str(p) for t, p in self.datasets.items()},
            "versions": versions(), "machine": machine(), "git_commit": git_commit(),
        }

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        interrupted: Interrupted | None = None
        started = time.monotonic()
        try:
            self.prepare()
            write_manifest(self.run_dir, self.manifest())
            p = self.plan
            levels = len(p.concurrency) + len(p.rates)
            print(f"run folder: {self.run_dir}\nmatrix: {len(self.targets)} server(s) x {len(p.tasks)} task(s) x "
                  f"{len(p.modes)} mode(s) x {levels} level(s)"
                  + (f" x {p.repeat} repeats" if p.repeat > 1 else "")
                  + (" + saturation run" if p.searches else "")
                  + (f" + {p.sweep}-rate sweep" if p.sweep else "")
                  + (f" + capacity search (at most {p.capacity_steps} steps)" if p.find_capacity else "")
                  + f" = {self.progress.total} cells" + (" at most" if p.find_capacity else ""), flush=True)
            for target in self.targets:
                self.stop.check()
                if self.halted:
                    break
                self.run_server(target)
        except Interrupted as exc:
            interrupted = exc
        finally:
            self.stop_server()
        code = 1 if self.failed_any and self.args.on_error == "stop" else 0
        with self.stop.deferred():
            if self.recorded and not self.args.no_report:
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
        baseline = self.args.baseline if self.args.baseline in self.recorded_servers else None  # None: run.json's
        try:
            path = merge_run(self.run_dir, baseline=baseline)
        except Exception as exc:  # noqa: BLE001 - the run's files are kept; say why and how to retry
            print(f"report failed: {type(exc).__name__}: {exc} (retry: python -m reports.merge {self.run_dir})",
                  file=sys.stderr, flush=True)
            return 1
        print(f"report: {path}", flush=True)
        return 0

    def stop_server(self) -> None:
        with self.stop.deferred():
            current, self.current = self.current, None
            if current is not None:
                current.stop()

    # ------------------------------------------------------------------ one server

    def run_server(self, target: Target) -> None:
        kind = self.kinds[target.name]
        plan = self.plan
        print(f"== {target.name}: {'using ' + target.url if target.url else 'starting ' + kind.name} ...", flush=True)
        try:
            running = start_target(target, kind, self.settings, self.run_dir / target.name / "server.log")
        except ServiceError as exc:
            self.failed_any = True
            first_line = str(exc).splitlines()[0]
            print(f"   {target.name} failed to start: {first_line}", flush=True)
            for task in plan.tasks:
                for mode in plan.modes:
                    for cell in plan.fixed_cells(target.name, task, mode) + (
                            [plan.saturation_cell(target.name, task, mode)] if plan.searches else []):
                        cell.status, cell.error = "skipped", f"server failed to start: {first_line}"
                        self.record(cell)
            self.progress.server_skipped(plan.cells_per_server())
            if self.args.on_error == "stop":
                self.halted = True
            return
        self.current = running
        self.progress.server_started(running.ready_s)
        try:
            for task in plan.tasks:
                for mode in plan.modes:
                    for cell in plan.fixed_cells(target.name, task, mode):
                        if self.run_cell(cell) is None and self.halted:
                            return
                    if plan.searches:
                        self.run_searches(target.name, task, mode)
                    if self.halted:
                        return
        finally:
            self.stop_server()

    def record(self, cell: Cell) -> None:
        append_cell(self.run_dir, cell)
        self.recorded += 1
        self.recorded_servers.add(cell.server)

    def run_cell(self, cell: Cell) -> CellResult | None:
        """Run one cell and print its progress line; None when it could not run (or the run halted)."""
        self.stop.check()
        if self.halted:
            return None
        label = f"{self.progress.counter()} {cell_label(cell, self.plan.repeat)}: "
        if self.current is None or not self.current.alive():
            cell.status, cell.error = "skipped", "server died earlier in the run"
            self.record(cell)
            self.progress.cell_done(None)
            print(f"{label}skipped (server died); {self.progress.left_text()}", flush=True)
            return None
        assert self.cells is not None, "prepare() first"
        result = self.cells.run(cell, self.current, label)
        self.recorded += 1
        self.recorded_servers.add(cell.server)
        if cell.status == "ok" and not self.current.alive():
            cell.status, cell.error = "failed", "server died during the cell"
            append_cell(self.run_dir, cell)
        self.progress.cell_done(cell.wall_s)
        print(f"{figures(cell, result.summary, self.args.throughput_only)}; {self.progress.left_text()}", flush=True)
        if cell.status == "failed":
            self.failed_any = True
            if self.args.on_error == "stop":
                self.halted = True
        self.stop.check()
        return result

    # ------------------------------------------------------------------ sweeps and capacity

    def run_searches(self, server: str, task: str, mode: str) -> None:
        """The saturation run, then the sweep's rates and the capacity search of one task and mode."""
        plan = self.plan
        cell = plan.saturation_cell(server, task, mode)
        result = self.run_cell(cell)
        saturation = (result.summary.request_throughput
                      if result is not None and result.summary is not None and cell.status == "ok" else 0.0)
        if saturation <= 0:
            self.progress.shrink(plan.search_cells() - 1)
            if not self.halted:
                print(f"   {server} {task} {mode}: no saturation throughput measured, so no sweep or capacity search",
                      flush=True)
            return
        for rate in sweep_rates(saturation, plan.sweep) if plan.sweep else []:
            for k in range(plan.repeat):
                if self.run_cell(plan.cell(server, task, mode, plan.pool, rate=rate, repeat=k, phase="sweep")) is None \
                        and self.halted:
                    return
        if plan.find_capacity:
            self.find_capacity(server, task, mode, saturation)

    def find_capacity(self, server: str, task: str, mode: str, saturation: float) -> CapacitySearch:
        """Bisect over the rate from ``saturation``; append the search (finished or not) to ``capacity.jsonl``."""
        plan, args = self.plan, self.args
        search = CapacitySearch(saturation, plan.capacity_steps)
        try:
            while (rate := search.next_rate()) is not None:
                cell = plan.cell(server, task, mode, plan.pool, rate=rate, phase="capacity")
                result = self.run_cell(cell)
                if result is None:
                    break
                search.add(Step.measured(rate, cell.prefix, result.summary, args.slo_target, args.max_lag))
        finally:
            self.progress.shrink(plan.capacity_steps - len(search.steps))
            with self.stop.deferred():
                append_capacity(self.run_dir, search.entry(server, task, mode, args.slo, args.slo_target))
                print(f"   capacity {server} {task} {mode} under {args.slo.describe()} at {args.slo_target:g} %: "
                      f"{search.describe()}", flush=True)
        return search
