"""``llmload tune``: server configurations compared by their capacity at an SLO, in a seeded interleaved order.

Each configuration (:mod:`.grid`: the servers of ``--servers`` crossed with
``--grid``, ``--vllm-args-set`` or ``--grid-file``) is one run of the runner
(:class:`~llmload.runner.matrix.Runner`) with that server alone and
``--find-capacity``: its server started, its saturation measured, its capacity
searched at ``--slo`` (the search's steps are its throughput-latency curve, with
any ``--concurrency``, ``--rates`` or ``--sweep`` levels given beside), then
stopped. ``--repeat N`` runs every configuration N times, one *block* each; the
runs' order is :meth:`~llmload.runner.schedule.Order.runs`' (``--order``,
``--order-seed``). Every other option is the runner's, declared once
(:func:`~llmload.runner.options.add_runner_options`).

The tune's folder (``--out``) holds ``tune.json`` (its settings, configurations,
the order of its runs and each run's state: :mod:`llmload.core.runfiles`), the
runs under ``runs/<configuration>/b<block>/``, and the report
(:mod:`reports.tune`). ``llmload tune --resume DIR``, or the same command with
``--out DIR``, goes on where it stopped: runs done (or failed) are kept, a run
that was interrupted is moved aside (``b1.interrupted-1``) and run again; a
folder made with other settings is refused. A configuration whose server does
not start is recorded and reported, and the tune goes on with the others.

Exit codes: 0 every run done, 1 some configuration failed (its server did not
start, or its run stopped with an error; the others are measured and reported),
2 bad input (before anything starts), 130 or 143 interrupted (SIGINT, SIGTERM).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from llmload.core.cliargs import (CLIError, OneLineParser, add_options, fail, from_namespace, option,
                                  option_fields, parse_with_file, print_error)
from llmload.core.paths import RESULTS_DIR
from llmload.core.runfiles import (TUNE_MANIFEST, TUNE_RUNS, RunFolderError, read_capacity, read_cells, read_tune,
                                   write_tune)
from llmload.runner.grid import Configuration, configurations, flag_pairs, grid_axis, read_grid_file
from llmload.runner.interrupts import Interrupted, StopSignal
from llmload.runner.manifest import git_commit, machine, versions
from llmload.runner.matrix import Runner, RunnerError
from llmload.runner.options import RunnerSettings, add_runner_options, resolve
from llmload.runner.schedule import Order
from llmload.targets import get_kind

PROG = "python -m llmload.runner.tune"


@dataclass(frozen=True)
class TuneOptions:
    """What a tune compares and how it goes on; everything else is the runner's options."""

    grid: list[tuple[str, tuple[str, ...]]] | None = option(
        None, "a flag of the basic server (python -m server --help, without its dashes) and the values to try, for "
              "every basic server of --servers; repeated: each value crossed with each of the others' (e.g. --grid "
              "max-num-seqs=4,16,32)", action="append", type=grid_axis, metavar="FLAG=V1,V2")
    vllm_args_set: list[tuple] | None = option(
        None, "one configuration of every vLLM server of --servers: its own vLLM flags, one shell-quoted string "
              "added after --vllm-args; repeated, one configuration each (e.g. --vllm-args-set='--max-num-seqs 4' "
              "--vllm-args-set='--max-num-seqs 16')", action="append", type=flag_pairs, metavar="ARGS")
    grid_file: Path | None = option(
        None, "named configurations in a TOML or JSON file, as vllm bench sweep's --serve-params: a list of tables "
              "(TOML: [[configs]]) or a table of named tables, each with its server and its flags (server = "
              "\"basic-batched\", max-num-seqs = 16); beside or instead of --servers (docs/tune.md)",
        type=Path, metavar="FILE")
    resume: Path | None = option(
        None, "go on with the tune in DIR with the settings it was started with: its finished runs are kept, its "
              "interrupted one runs again (the same as giving its command again with --out DIR)", type=Path,
        metavar="DIR")



#: The tune's own options (what a --scenario file cannot give).
TUNE_OPTIONS = [f.name for f in option_fields(TuneOptions)]
#: Runner options a tune refuses: it repeats whole configurations, and ranks them without a baseline.
REFUSED = {"target_ci": "a tune repeats whole configurations: --repeat N runs each N times, one block each",
           "max_repeats": "a tune repeats whole configurations: --repeat N runs each N times, one block each",
           "baseline": "a tune ranks its configurations by their capacity: it has no baseline"}
#: What a resumed tune must share with the one in its folder (beside its configurations and order).
NOT_KEYED = ("out", "no_report", "scenario", "repeat")


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog=PROG,
        description="Compare server configurations by their capacity at an SLO: each configuration (a server "
                    "with its own flags: --grid, --vllm-args-set or --grid-file, crossed with --servers) started, "
                    "its capacity searched under --slo (--find-capacity) and its throughput-latency curve "
                    "measured, then stopped, in a seeded interleaved order (--repeat N: every configuration N "
                    "times, one block each; --order-seed); the report ranks them with 95 % intervals, says which "
                    "differences are significant (Holm's correction), draws the Pareto front and names the best. "
                    "The other options are the runner's. See docs/tune.md.",
        epilog="Exit codes: 0 every run done; 1 some configuration failed (its server did not start: recorded, "
               "reported, the tune went on with the others); 2 bad input; 130 or 143 interrupted (SIGINT or "
               "SIGTERM; go on with --resume DIR).")
    add_options(p.add_argument_group("the tune: its configurations, resuming"), TuneOptions, names=TUNE_OPTIONS)
    add_runner_options(p)
    return p


@dataclass(frozen=True)
class Tune:
    """A tune's resolved settings: the runner's, its configurations, its blocks and order, its folder."""

    settings: RunnerSettings
    configurations: list[Configuration]
    blocks: int
    out: Path
    argv: list[str]
    max_error_rate: float | None = None

    @property
    def order(self) -> Order:
        return Order(self.settings.order, self.settings.order_seed)

    def key(self) -> dict[str, Any]:
        """What a folder's tune must share with this one to go on with it (JSON's builtins)."""
        s = self.settings
        runner = {k: v for k, v in s.record().items() if k not in NOT_KEYED}
        key = {"configurations": [c.record() for c in self.configurations], "blocks": self.blocks,
               "order": s.order, "order_seed": s.order_seed, "slo": s.slo.to_dict() if s.slo else None,
               "max_error_rate": self.max_error_rate, "runner": runner}
        return json.loads(json.dumps(key, default=str))

    def run_settings(self, config: Configuration, run_dir: Path) -> RunnerSettings:
        """The runner's settings of one run: this configuration alone, its settings, one repeat, no report of
        its own (the tune's report covers it; ``llmload report RUN_DIR`` makes one)."""
        prices = self.settings.price_per_hour or {}
        price = prices.get(config.name, prices.get(config.server))
        return replace(self.settings, servers=[config.target], target=config.settings, baseline=None, out=run_dir,
                       repeat=1, target_ci=None, max_repeats=None, no_report=True,
                       price_per_hour={config.name: price} if price is not None else None)


def parse_tune(argv: Sequence[str]) -> Tune:
    """The tune of a command line; bad input ends the process with one ``error:`` line and exit code 2."""
    argv = list(argv)
    parser = build_parser()
    namespace = parse_with_file(parser, argv, "scenario", exclude=TUNE_OPTIONS)
    options = from_namespace(TuneOptions, namespace)
    if options.resume is not None:
        return resumed(parser, argv, options.resume)
    for name, why in REFUSED.items():
        if getattr(namespace, name, None) is not None:
            fail(f"--{name.replace('_', '-')}: {why}")
    if namespace.servers is None and options.grid_file is None:
        fail("name the servers whose configurations to compare: --servers basic-batched,vllm (with --grid or "
             "--vllm-args-set), or --grid-file FILE")
    if namespace.slo is None:
        fail("llmload tune ranks configurations by their capacity at an SLO: give --slo (e.g. --slo "
             "ttft=500,e2e=4000)")
    try:
        settings = resolve(RunnerSettings.from_namespace(namespace, find_capacity=True))
        named = read_grid_file(options.grid_file) if options.grid_file is not None else []
        found = configurations(settings.servers if namespace.servers is not None else [], settings.target,
                               options.grid or [], options.vllm_args_set or [], named)
    except CLIError as exc:
        fail(str(exc))
    for kind in dict.fromkeys(c.kind for c in found):
        why = get_kind(kind).unavailable()
        if why:
            fail(f"{kind}: {why}")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Tune(settings, found, settings.repeat, Path(settings.out or RESULTS_DIR / f"tune-{stamp}"), argv,
                settings.max_error_rate)


def resumed(parser: argparse.ArgumentParser, argv: list[str], folder: Path) -> Tune:
    """The tune in ``folder``, parsed again from the command it was started with."""
    others = [a for i, a in enumerate(argv) if not (a == "--resume" or a.startswith("--resume=")
                                                     or (i and argv[i - 1] == "--resume"))]
    if others:
        fail("--resume DIR goes on with the settings the tune was started with: give no other option")
    try:
        info = read_tune(folder)
    except RunFolderError as exc:
        fail(f"--resume: {exc}")
    stored = info.get("argv")
    if not isinstance(stored, list) or any("--resume" in str(a) for a in stored):
        fail(f"--resume: {folder / TUNE_MANIFEST} does not hold the command the tune was started with")
    return replace(parse_tune([*stored, "--out", str(folder)]), argv=stored)


# --------------------------------------------------------------------------- the tune's folder


def first_difference(old: Any, new: Any, where: str = "") -> str:
    """The first place two keys differ: ``configurations``, ``runner.requests``, ..."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in list(old) + [k for k in new if k not in old]:
            if old.get(k) != new.get(k):
                return first_difference(old.get(k), new.get(k), f"{where}.{k}" if where else k)
    return where or "its settings"


class TuneRun:
    """Runs a tune (:func:`parse_tune`) in its folder; ``run()`` -> exit code."""

    def __init__(self, tune: Tune, stop: StopSignal | None = None):
        self.tune = tune
        self.stop = stop or StopSignal()
        self.folder = tune.out
        self.by_name = {c.name: c for c in tune.configurations}
        self.info: dict[str, Any] = {}

    # ------------------------------------------------------------------ state

    def start_or_resume(self) -> None:
        """Read the folder's ``tune.json`` (the same tune goes on) or start a new one; :class:`CLIError` for a
        folder that holds another tune."""
        key = self.tune.key()
        if (self.folder / TUNE_MANIFEST).is_file():
            try:
                info = read_tune(self.folder)
            except RunFolderError as exc:
                raise CLIError(str(exc)) from None
            if info.get("key") != key:
                raise CLIError(f"{self.folder} holds a tune made with other settings ({first_difference(info.get('key'), key)} "
                               "differs): give another --out, or go on with it as it was: --resume "
                               f"{self.folder}")
            self.info = info
            done = sum(r["state"] in ("done", "failed") for r in info["runs"])
            print(f"tune folder: {self.folder} (going on: {done} of {len(info['runs'])} runs finished)", flush=True)
            return
        if self.folder.exists() and any(self.folder.iterdir()):
            raise CLIError(f"--out {self.folder} is a folder that holds something else than a tune: give a new "
                           "or empty one")
        t = self.tune
        order = [{"config": name, "block": block, "dir": f"{TUNE_RUNS}/{self.by_name[name].folder}/b{block}",
                  "state": "pending", "error": "", "attempts": 0, "started": None, "wall_s": None,
                  "capacity": []}
                 for name, block in t.order.runs([c.name for c in t.configurations], t.blocks)]
        self.info = {"started": dt.datetime.now().isoformat(timespec="seconds"),
                     "command": " ".join(["llmload tune"] + [shlex.quote(a) for a in t.argv]), "argv": t.argv,
                     "key": key, "configurations": key["configurations"], "blocks": t.blocks,
                     "order": {"kind": t.settings.order, "seed": t.settings.order_seed,
                               "description": describe_order(t)},
                     "slo": key["slo"], "slo_target": t.settings.slo_target, "max_error_rate": t.max_error_rate,
                     "runs": order, "versions": versions(), "machine": machine(), "git_commit": git_commit()}
        self.save()
        print(f"tune folder: {self.folder}", flush=True)

    def save(self) -> None:
        with self.stop.deferred():
            write_tune(self.folder, {**self.info, "updated": dt.datetime.now().isoformat(timespec="seconds")})

    def header(self) -> str:
        t = self.tune
        names = ", ".join(c.name for c in t.configurations)
        return (f"configurations ({len(t.configurations)}): {names}\norder: {describe_order(t)}; "
                f"{len(self.info['runs'])} runs, each a capacity search under {t.settings.slo.describe()} at "
                f"{t.settings.slo_target:g} %")

    # ------------------------------------------------------------------ the runs

    def run(self) -> int:
        interrupted: Interrupted | None = None
        began = time.monotonic()
        try:
            self.start_or_resume()
            print(self.header(), flush=True)
            total = len(self.info["runs"])
            for number, entry in enumerate(self.info["runs"], 1):
                self.stop.check()
                where = f"== tune run {number}/{total}: {entry['config']} block {entry['block']}"
                if entry["state"] in ("done", "failed"):
                    print(f"{where}: {entry['state']} before, kept", flush=True)
                    continue
                self.run_one(entry, where)
                if self.stop.requested:
                    raise Interrupted(self.stop.signum)
        except Interrupted as exc:
            interrupted = exc
        except CLIError as exc:
            return print_error(str(exc))
        except RunnerError as exc:
            self.save()
            return print_error(str(exc))
        code = 1 if any(r["state"] == "failed" for r in self.info["runs"]) else 0
        with self.stop.deferred():
            if not self.tune.settings.no_report and any(r["state"] == "done" for r in self.info["runs"]):
                code = max(code, self.report())
        if interrupted is None and self.stop.requested:
            interrupted = Interrupted(self.stop.signum)
        if interrupted is not None:
            done = sum(r["state"] in ("done", "failed") for r in self.info.get("runs", []))
            print(f"tune interrupted by {interrupted.name} after {time.monotonic() - began:.0f}s: {done} of "
                  f"{len(self.info.get('runs', []))} runs finished; go on with: llmload tune --resume "
                  f"{self.folder}", file=sys.stderr, flush=True)
            return interrupted.exit_code
        return code

    def run_one(self, entry: dict, where: str) -> None:
        """One configuration in one block: a fresh run folder (an interrupted one's moved aside), the runner, its
        outcome in ``tune.json``."""
        config = self.by_name[entry["config"]]
        run_dir = self.folder / entry["dir"]
        if run_dir.exists():
            aside = next(run_dir.with_name(f"{run_dir.name}.interrupted-{n}") for n in range(1, 1000)
                         if not run_dir.with_name(f"{run_dir.name}.interrupted-{n}").exists())
            run_dir.rename(aside)
            print(f"{where}: its interrupted run moved aside to {aside.relative_to(self.folder)}", flush=True)
        print(f"{where}: {config.kind} {('with ' + config.record()['args']) if config.flags else 'as it is'}",
              flush=True)
        entry.update(state="running", error="", attempts=entry["attempts"] + 1,
                     started=dt.datetime.now().isoformat(timespec="seconds"), capacity=[])
        self.save()
        began = time.monotonic()
        runner = Runner(self.tune.run_settings(config, run_dir), self.stop)
        try:
            runner.run()
        except RunnerError as exc:
            entry.update(state="failed", error=str(exc), wall_s=round(time.monotonic() - began, 1))
            raise
        finally:
            entry["wall_s"] = round(time.monotonic() - began, 1)
            if entry["state"] == "running" and self.stop.requested:
                entry["state"] = "interrupted"
            self.save()
        if self.stop.requested:
            return
        entry.update(self.outcome(run_dir))
        self.save()
        if entry["state"] == "failed":
            print(f"{where}: FAILED: {entry['error']}; the tune goes on with the others", flush=True)
        else:
            found = "; ".join(capacity_line(c) for c in entry["capacity"]) or "no capacity search ran"
            print(f"{where}: done ({entry['wall_s']:.0f}s): {found}", flush=True)

    @staticmethod
    def outcome(run_dir: Path) -> dict:
        """A finished run's state: failed when its server never started (every cell skipped for it), else done,
        with what its capacity searches found."""
        try:
            cells = read_cells(run_dir)
        except RunFolderError as exc:
            return {"state": "failed", "error": str(exc)}
        skipped = [c for c in cells if c.status == "skipped"]
        if cells and len(skipped) == len(cells):
            return {"state": "failed", "error": skipped[0].error}
        found = [{k: e.get(k) for k in ("task", "mode", "capacity_rps", "ci_low", "ci_high")}
                 for e in read_capacity(run_dir)]
        return {"state": "done", "error": "", "capacity": found}

    def report(self) -> int:
        """The tune's report; 0, or 1 when it could not be made (the runs stay)."""
        from reports.tune import ReportError, best_lines, make_tune_report  # the report: only once there is one

        try:
            path, report = make_tune_report(self.folder)
        except ReportError as exc:
            print(f"tune report failed: {exc} (retry: python -m reports.tune {self.folder})", file=sys.stderr,
                  flush=True)
            return 1
        for line in best_lines(report):
            print(line, flush=True)
        print(f"tune report: {path}", flush=True)
        return 0


def describe_order(tune: Tune) -> str:
    blocks = f"{tune.blocks} block{'s' if tune.blocks > 1 else ''}"
    if tune.settings.order != "interleaved":
        return f"sequential (each configuration's {blocks} in a row, in the order given)"
    return f"interleaved: {blocks}, each every configuration once in a random order (seed {tune.settings.order_seed})"


def capacity_line(entry: dict) -> str:
    """``qa stream: 3.1 req/s [2.9, 3.3]`` of a run's capacity search (``none held`` where no rate held)."""
    value, low, high = entry.get("capacity_rps"), entry.get("ci_low"), entry.get("ci_high")
    head = f"{entry.get('task')} {entry.get('mode')}: "
    if value is None:
        return head + "none held" + (f" (failed at {high:.4g} req/s)" if high else "")
    return head + f"{value:.4g} req/s [{low:.4g}, {'open' if high is None else f'{high:.4g}'}]"


def main(argv: list[str] | None = None) -> int:
    tune = parse_tune(sys.argv[1:] if argv is None else argv)
    stop = StopSignal().install()
    try:
        return TuneRun(tune, stop).run()
    finally:
        stop.uninstall()


if __name__ == "__main__":
    raise SystemExit(main())
