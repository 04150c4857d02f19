"""The runner's settings: every option declared once, on the dataclasses below, the named profiles, the checks.

Each option is a field made with :func:`~llmload.core.cliargs.option` (its flag,
type, help and default in one place) of one group class (:data:`GROUPS`, the
groups of ``--help``); :class:`RunnerSettings` is all of them, typed, with the
servers' shared settings (:class:`~llmload.targets.TargetSettings`) as
``target``. Options the runner shares with another program are that program's
declarations (:func:`~llmload.core.cliargs.borrow`): ``--servers`` and
``--baseline`` (:class:`~llmload.targets.ServerSelection`, the benchmarks'
too), ``--max-tokens``, ``--api``, ``--seed``, ``--warmup``, ``--slo``, the
cancellation, the retries, ``--max-error-rate`` and the trace's shaping
(:class:`~llmload.loadgen.options.LoadSettings`).

The options declared with a None default take their value from a named profile
(:data:`PROFILES`: ``full``, or ``quick`` with ``--quick``) when not given;
``--scenario FILE`` reads options from a TOML or JSON file as if given before
the command line. :func:`resolve` fills the profile in and checks the options
against each other. Every bad input ends the runner before anything starts
with one line, ``error: argument --x: ...`` or ``error: --x ...``, and exit
code 2.

Another program builds the runner's settings with :func:`add_runner_options`
on its own parser and :meth:`RunnerSettings.from_namespace`, or without a
command line: ``resolve(RunnerSettings(servers=..., rates=[...]))``.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from llmload.core.cancel import parse_cancel_after
from llmload.core.cliargs import (CLIError, OneLineParser, add_options, borrow, choice_list, duration, fail,
                                  float_list, from_namespace, int_list, non_negative_int, number, option,
                                  option_fields, parse_with_file, positive_float, positive_int)
from llmload.core.cost import prices
from llmload.core.metrics import MODES, SLO
from llmload.core.sequential import CONFIDENCE, Budget, requests_to_hold
from llmload.loadgen.options import ARRIVALS, LoadSettings, trace_shaping
from llmload.runner.schedule import ORDERS
from llmload.targets import DEFAULT_SERVERS, ServerSelection, Target, TargetSettings, choose_servers
from llmload.tasks import DatasetError, default_task_names, task_names
from llmload.tasks.traces import check_lengths, offsets, read_trace
from llmload.runner.capacity import CI_PCT as CAPACITY_CI

#: The full comparison (``make compare``); ``--quick`` replaces some of it with :data:`QUICK`.
#: Sized for its headline ratios, vLLM's output tok/s over each basic engine's at 8 users, per task: their 95 %
#: intervals must cover run-to-run variation, which on the 2-core machine is 12-26 % (sd) for one 48-request
#: cell, so one run cannot give +-15 %. Each level runs in 3 to 5 interleaved repeats (each repeat in its own
#: block of the order, the ratio paired by block), stopping once its own output tok/s and TTFT p50 are known to
#: +-15 % (--target-ci). With a ratio's spread over blocks of about 12 %, 5 blocks give +-15 % (t(4) x 12 % /
#: sqrt(5)). The time goes to the repeats: 8 users only (1 user: --concurrency 1,8, about three times the time) and
#: the registry's default tasks, qa and code (chat's long prompts stall decoding: --tasks chat,qa,code). A block
#: takes about 8 minutes on two cores: 5 blocks and the server starts about 43 minutes, 54 with five other jobs on
#: the machine (2026-12-05; docs/runner.md, docs/results.md). The full matrix: --tasks
#: chat,summarization,qa,code --modes sync,stream --concurrency 1,2,4,8.
#: The servers' default is the registry's (:data:`~llmload.targets.DEFAULT_SERVERS`); tasks None: the task
#: registry's default tasks (synthetic for a trace alone).
FULL = dict(tasks=None, modes=["stream"], concurrency=[8], requests=48, max_tokens=32, repeat=3, target_ci=15.0,
            max_repeats=5)
QUICK = dict(tasks=["chat", "qa"], concurrency=[1, 4], requests=4, max_tokens=16, repeat=1, target_ci=None,
             max_repeats=None)
#: The named profiles: the values of the options left unset (declared with a None default); ``quick`` is laid
#: over ``full``.
PROFILES = {"full": FULL, "quick": QUICK}
#: Given either (or --quick, or open-loop levels only), the profile's repeats do not apply (--max-repeats alone caps
#: them).
REPEAT_SIZING = ("repeat", "target_ci")
DEFAULT_ARRIVAL = "poisson"
DEFAULT_SLO_TARGET = 99.0
DEFAULT_MAX_LAG_S = 0.5
DEFAULT_CAPACITY_STEPS = 6
DEFAULT_CAPACITY_LOOKS = 5
DEFAULT_MAX_REPEATS = 5
#: Seconds Locust gets to finish its users' requests once asked to stop (its ``--stop-timeout``).
LOCUST_STOP_TIMEOUT_S = 10


def percentage(include_100: bool):
    """A type for a percentage above 0 and at most (``include_100``) or below 100."""
    what = "a percentage > 0 and " + ("<= 100" if include_100 else "< 100")
    above_zero = number(float, 0.0, inclusive=False, what=what)

    def parse(text: str) -> float:
        value = above_zero(text)
        if value > 100 or (value == 100 and not include_100):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


percent_type = percentage(include_100=True)


def _list(values) -> str:
    return ",".join(map(str, values))


# --------------------------------------------------------------------------- the declarations, by group

@dataclass(frozen=True)
class MatrixOptions:
    """What is compared: the profile, the servers, the tasks, the modes and the API."""

    quick: bool = option(False, f"small matrix: tasks {_list(QUICK['tasks'])}, concurrency "
                                f"{_list(QUICK['concurrency'])}, {QUICK['requests']} requests, "
                                f"{QUICK['max_tokens']} tokens (a few minutes)", action="store_true")
    scenario: Path | None = option(None, "a TOML or JSON file of option = value, its keys the options' names "
                                         "(requests = 16, tasks = [\"qa\"], max_tokens = 8): read as if given before "
                                         "the command line, whose flags win (docs/runner.md)", type=Path,
                                   metavar="FILE")
    servers: list[Target] | None = borrow(ServerSelection, "servers")
    baseline: str | None = borrow(ServerSelection, "baseline")
    tasks: list[str] | None = option(None, lambda: f"comma list of {', '.join(task_names())} (default: "
                                                   f"{_list(default_task_names())})",
                                     type=choice_list(task_names, "tasks"), metavar="LIST")
    modes: list[str] | None = option(None, f"comma list of sync, stream (default: {_list(FULL['modes'])})",
                                     type=choice_list(MODES, "modes"), metavar="LIST")
    api: str = borrow(LoadSettings, "api")
    throughput_only: bool = option(False, "request and token throughput per level only: sync requests, no per-token "
                                          "timing (as the seed's option did)", action="store_true")


@dataclass(frozen=True)
class LevelOptions:
    """The load levels: closed loops, offered rates, sweeps and capacity searches, and what each request asks."""

    concurrency: list[int] | None = option(
        None, "closed-loop levels: comma list of concurrent users, each sending its next request when the last one "
              f"ends (default: {_list(FULL['concurrency'])}, unless --rates, --sweep or --find-capacity is given; "
              "--parallel is the seed's name for it)", aliases=("--parallel",), type=int_list, metavar="LIST")
    requests: int | None = option(None, f"requests per cell, warm-up included (default: {FULL['requests']}; a "
                                        "closed-loop cell sends at least its concurrency)", type=positive_int,
                                  metavar="N")
    max_tokens: int | None = borrow(LoadSettings, "max_tokens", default=None,
                                    note=f"; the runner asks for exactly N, with ignore_eos (default: "
                                         f"{FULL['max_tokens']})")
    warmup: int = borrow(LoadSettings, "warmup", note="; in every cell, fewer than --requests (default: "
                                                      "%(default)s)")
    rates: list[float] | None = option(None, "open-loop levels: comma list of offered request rates (req/s over the "
                                             "whole cell), instead of or beside --concurrency", type=float_list,
                                       metavar="LIST")
    sweep: int | None = option(None, "measure each server's saturation throughput (a closed loop at --pool users), "
                                     "then run N rates evenly spaced up to it (saturation x 1/N, 2/N, ..., 1), as "
                                     "GuideLLM's sweep does", type=positive_int, metavar="N")
    find_capacity: bool = option(False, "per server, task and mode: the highest rate whose SLO attainment stays at "
                                        "or above --slo-target with dispatch lag p99 under --max-lag, searched from "
                                        "the saturation throughput until its 95 %% interval is within --capacity-ci "
                                        "(needs --slo; written to capacity.jsonl with its interval)",
                                 action="store_true")
    capacity_steps: int = option(DEFAULT_CAPACITY_STEPS, "most rates one capacity search tries (default: "
                                                         "%(default)s)", type=positive_int, metavar="N")
    capacity_looks: int = option(DEFAULT_CAPACITY_LOOKS, "most cells one capacity step runs before it decides: "
                                                         "--requests (at least the requests a hold needs at "
                                                         "--slo-target), then twice as many as the cell before, "
                                                         "while the step is undecided (default: %(default)s)",
                                 type=positive_int, metavar="N")
    capacity_ci: float = option(CAPACITY_CI, "a capacity search stops once the capacity's 95 %% interval is within "
                                             "+-PCT %% of its centre (default: %(default)s)",
                                type=percentage(include_100=False), metavar="PCT")
    slo: SLO | None = borrow(LoadSettings, "slo", note="; open-loop latencies count from the intended start")
    slo_target: float = option(DEFAULT_SLO_TARGET, "share of requests that must meet --slo for a rate to hold, shown "
                                                   "with 95 %% confidence (default: %(default)s %%)",
                               type=percent_type, metavar="PCT")
    max_lag: float = option(DEFAULT_MAX_LAG_S, "dispatch lag p99 above which a capacity step fails: the load "
                                               "generator could not keep the schedule (default: "
                                               f"{DEFAULT_MAX_LAG_S * 1000:g} ms)", type=duration("ms"),
                            metavar="MS")
    pool: int | None = option(None, "most requests in flight in an open-loop cell (Locust's -u there) and the users "
                                    "of the saturation run (default: --requests, i.e. no bound within a cell)",
                              type=positive_int, metavar="N")
    arrival: str = option(DEFAULT_ARRIVAL, "how open-loop requests are spaced (default: %(default)s, as vllm bench "
                                           "serve)", choices=ARRIVALS)
    burstiness: float | None = option(None, "--arrival gamma only: the gamma shape (1 = Poisson, < 1 burstier, > 1 "
                                            "steadier)", type=positive_float, metavar="K")
    seed: int = borrow(LoadSettings, "seed", note="; the same for every server (default: %(default)s)")
    cancel_rate: float = borrow(LoadSettings, "cancel_rate")
    cancel_after: str = borrow(LoadSettings, "cancel_after")
    retry: int = borrow(LoadSettings, "retry")
    retry_max_wait: float = borrow(LoadSettings, "retry_max_wait")
    max_error_rate: float | None = borrow(LoadSettings, "max_error_rate", note="; such a cell is marked error-rate, "
                                                                           "its figures kept")


@dataclass(frozen=True)
class RepeatOptions:
    """How often each level runs: a fixed number of repeats, or until its headline intervals are narrow."""

    repeat: int | None = option(None, "run every cell R times, each repeat in its own block of the order (the report "
                                      "combines the repeats; with --target-ci: the fewest repeats). Default: "
                                      f"--repeat {FULL['repeat']} --target-ci {FULL['target_ci']:g} --max-repeats "
                                      f"{FULL['max_repeats']} (--max-repeats alone changes the cap); --repeat 1 when "
                                      "--target-ci is given alone, with --quick, or with open-loop levels only",
                                type=positive_int, metavar="R")
    target_ci: float | None = option(None, "repeat each level until the 95 %% intervals of its headline figures "
                                           "(output tok/s; TTFT p50 when streaming), over its repeats, are within "
                                           "+-PCT %% of their values, at least max(--repeat, 2) and at most "
                                           "--max-repeats times; converged levels drop out of the next blocks",
                                     type=percentage(include_100=False), metavar="PCT")
    max_repeats: int | None = option(None, f"with --target-ci: the most repeats of a level (default: "
                                           f"{DEFAULT_MAX_REPEATS})", type=positive_int, metavar="N")


@dataclass(frozen=True)
class TraceOptions:
    """A trace replayed as one more level (docs/traces.md)."""

    trace: Path | None = option(None, "one more level per server and mode: replay this trace (each request at its "
                                      "time with its lengths, under the first of --tasks, synthetic by default; "
                                      "--pool bounds the requests in flight); its cells are phase 'trace'",
                                type=Path, metavar="FILE")
    trace_format: str = borrow(LoadSettings, "trace_format")
    time_scale: float = borrow(LoadSettings, "time_scale")
    trace_start: float = borrow(LoadSettings, "trace_start")
    trace_duration: float = borrow(LoadSettings, "trace_duration")
    trace_block_size: int = borrow(LoadSettings, "trace_block_size")


@dataclass(frozen=True)
class ServerOptions:
    """The runner's own server options, beside the servers' shared settings (``target``, their own options)."""

    vllm_prefix_caching: bool = option(False, "start vllm with automatic prefix caching, as the vllm-prefix-cache "
                                              "kind (off by default: every cell sends its task's prompts from the "
                                              "first one, and the basic server has no prefix cache, so vLLM would "
                                              "skip prefills the others do)", action="store_true")
    otel_receiver: bool = option(False, "receive OpenTelemetry spans in the runner (OTLP/HTTP on 127.0.0.1, no "
                                        "collector): every vLLM started exports its per-request span there, written "
                                        "to each cell's <cell>_spans.jsonl and joined to the requests in the report "
                                        "(queue, prefill, decode as vLLM measured them)", action="store_true")
    price_per_hour: dict[str, float] | None = option(
        None, "each server's price in USD per hour, by name (e.g. vllm=2.5,basic-batched=0.4): the report gives $ per "
              "1M output tokens and per 1,000 requests at each cell's throughput and at the capacity found (default: "
              "none)", type=prices, metavar="NAME=USD,...")
    target: TargetSettings = field(default_factory=TargetSettings)


@dataclass(frozen=True)
class RunOptions:
    """The run itself: its order, limits, inputs and outputs."""

    order: str = option(ORDERS[0], "interleaved: blocks of one repeat of every level of every server, each block "
                                   "in a random order drawn from --order-seed, so that drift over time spreads over "
                                   "every server; sequential: each server in turn, each level's repeats in a row "
                                   "(default: %(default)s)", choices=ORDERS)
    order_seed: int = option(0, "seed of the interleaved order (default: %(default)s)", type=non_negative_int,
                             metavar="N")
    max_servers_up: int = option(0, "most started servers up at once (default: 0 = as many as the memory holds; 1 = "
                                    "one at a time, each block's cells grouped by server)", type=non_negative_int,
                                 metavar="N")
    cell_timeout: float = option(600.0, "seconds after which one Locust cell is stopped and marked failed (default: "
                                        "%(default)s)", type=positive_float, metavar="S")
    on_error: str = option("continue", "after a failed cell or server: go on with the next, or stop the run "
                                       "(default: %(default)s)", choices=("continue", "stop"))
    data_dir: Path | None = option(None, "folder of ready prompt sets <task>.jsonl, used as they are (default: "
                                         "datasets/data, built or rebuilt for the model when missing or stale)",
                                   type=Path)
    out: Path | None = option(None, "run folder (default: results/<timestamp>)", type=Path)
    no_report: bool = option(False, "skip the merge at the end", action="store_true")


#: The groups of ``--help``, in order: a title and the classes whose options it lists.
GROUPS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("the matrix", (MatrixOptions,)),
    ("load levels: closed loop, open loop (offered rates), sweeps and capacity", (LevelOptions,)),
    ("repeats", (RepeatOptions,)),
    ("trace replay (docs/traces.md)", (TraceOptions,)),
    ("the servers", (TargetSettings, ServerOptions)),
    ("the run", (RunOptions,)),
)


@dataclass(frozen=True)
class RunnerSettings(RunOptions, ServerOptions, TraceOptions, RepeatOptions, LevelOptions, MatrixOptions):
    """Every option of the runner, typed (the fields of :data:`GROUPS`' classes), and the servers' shared settings
    as ``target``. Built from a command line by :func:`parse_settings`, or directly; :func:`resolve` fills the
    profile into the options left None and checks them."""

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace, **values: Any) -> "RunnerSettings":
        """The settings of options parsed by :func:`add_runner_options` (``values`` on top)."""
        return from_namespace(cls, namespace, target=from_namespace(TargetSettings, namespace), **values)

    @property
    def open_loop(self) -> bool:
        """True when the run has open-loop cells (rates, a sweep, a capacity search or a trace)."""
        return bool(self.rates or self.sweep or self.find_capacity or self.trace)

    def value(self, name: str) -> Any:
        """The option ``name``'s value, the runner's own or the servers' (``target``)."""
        return getattr(self, name) if name in _OWN else getattr(self.target, name)

    def record(self) -> dict[str, Any]:
        """Every option's value by name, in the order of ``--help`` (``run.json``'s settings; the servers and the
        SLO, which it writes apart, left out; paths as text)."""
        values = {}
        for _title, classes in GROUPS:
            for cls in classes:
                for f in option_fields(cls):
                    if f.name not in ("servers", "slo"):
                        value = self.value(f.name)
                        values[f.name] = str(value) if isinstance(value, Path) else value
        return values


_OWN = {f.name for f in dataclasses.fields(RunnerSettings)}


def add_runner_options(parser: argparse.ArgumentParser, groups=GROUPS) -> None:
    """Add the runner's options to ``parser`` (any argparse parser), one argument group per entry of ``groups``."""
    for title, classes in groups:
        group = parser.add_argument_group(title)
        for cls in classes:
            add_options(group, cls)


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m llmload.runner",
        description="Run the comparison matrix (servers x tasks x modes x load levels) with Locust and the resource "
                    "monitor, then merge the results into a report. Defaults: the embedded model, "
                    f"{DEFAULT_SERVERS}, the tasks {_list(default_task_names())}, mode {_list(FULL['modes'])}, "
                    "concurrency "
                    f"{_list(FULL['concurrency'])}, {FULL['requests']} requests of {FULL['max_tokens']} "
                    f"tokens per cell, {FULL['repeat']} to {FULL['max_repeats']} interleaved repeats of each level "
                    f"until its headline intervals are within +-{FULL['target_ci']:g} %. See docs/runner.md.",
        epilog="Progress: one line per cell, '[done/total] server task mode level: figures (cell seconds); about N "
               "min left'. The time left is the mean time of the cells done so far times the cells left, plus the "
               "mean server start-up so far times the start-ups still expected. SIGINT or SIGTERM (to the runner or "
               "its process group) stops Locust first, gracefully, then the server; the cell is recorded as "
               "interrupted, a partial report is made, and the exit code is 130 (SIGINT) or 143 (SIGTERM).")
    add_runner_options(p)
    return p


def parse_settings(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None
                   ) -> RunnerSettings:
    """The resolved settings of a command line (``--scenario``'s file read first); bad input ends the process with
    one ``error:`` line and exit code 2."""
    parser = parser or build_parser()
    namespace = parse_with_file(parser, argv, "scenario")
    try:
        return resolve(RunnerSettings.from_namespace(namespace))
    except CLIError as exc:
        fail(str(exc))


def resolve(settings: RunnerSettings) -> RunnerSettings:
    """The settings with the profile's values in the options left None, checked against each other.

    Raises :class:`~llmload.core.cliargs.CLIError` (one line) for options that contradict each other.
    """
    s = settings
    explicit_modes = s.modes is not None
    profile = {**PROFILES["full"], **(PROFILES["quick"] if s.quick else {})}
    if s.concurrency is None and s.open_loop:
        profile["concurrency"] = []  # rates, sweeps and searches replace the default closed-loop levels
    if profile["concurrency"] == [] or any(getattr(s, key) is not None for key in REPEAT_SIZING):
        profile.update(repeat=1, target_ci=None, max_repeats=None)  # one run per cell unless asked otherwise
    profile["tasks"] = profile["tasks"] or (["synthetic"] if s.trace else list(default_task_names()))
    s = replace(s, **{key: value for key, value in profile.items() if getattr(s, key) is None})
    servers, baseline = choose_servers(s.servers, s.baseline)
    if s.vllm_prefix_caching:
        servers = [replace(t, kind="vllm-prefix-cache") if t.kind == "vllm" else t for t in servers]
    s = replace(s, servers=servers, baseline=baseline)
    names = [t.name for t in servers]
    unpriced = [name for name in (s.price_per_hour or {}) if name not in names]
    if unpriced:
        raise CLIError(f"--price-per-hour {unpriced[0]}: no server of that name among --servers ({', '.join(names)})")
    if s.throughput_only:
        if explicit_modes and "stream" in s.modes:
            raise CLIError("--throughput-only sends sync requests only: leave --modes out or give --modes sync")
        s = replace(s, modes=["sync"])
    if s.warmup and s.warmup >= s.requests:
        raise CLIError(f"--warmup {s.warmup} must be smaller than --requests ({s.requests}): at least one request "
                       "of each cell must be measured")
    if s.find_capacity and s.slo is None:
        raise CLIError("--find-capacity needs --slo, the targets a rate must hold (e.g. --slo ttft=500,e2e=4000)")
    if bool(s.cancel_rate) != bool(s.cancel_after):
        raise CLIError("--cancel-rate P and --cancel-after WHEN go together (e.g. --cancel-rate 0.3 --cancel-after "
                       "ttft+1s)")
    if s.cancel_after and parse_cancel_after(s.cancel_after).needs_stream and "sync" in s.modes:
        raise CLIError(f"--cancel-after {s.cancel_after} counts from the stream's tokens: use --modes stream, or a "
                       "time after the send (e.g. 2s)")
    if s.retry_max_wait != LoadSettings.retry_max_wait and not s.retry:
        raise CLIError("--retry-max-wait caps the waits of --retry: give --retry N too")
    if s.burstiness is not None and s.arrival != "gamma":
        raise CLIError(f"--burstiness applies to --arrival gamma only (got --arrival {s.arrival})")
    if s.max_repeats is not None and s.target_ci is None:
        raise CLIError("--max-repeats applies with --target-ci only (without it every level runs --repeat times)")
    if s.target_ci is not None:
        s = replace(s, max_repeats=s.max_repeats or max(DEFAULT_MAX_REPEATS, s.repeat))
        fewest = max(s.repeat, 2)
        if s.max_repeats < fewest:
            raise CLIError(f"--max-repeats {s.max_repeats} must be at least {fewest}: --target-ci judges a level on "
                           f"max(--repeat, 2) repeats at least")
    if s.find_capacity:
        problem = capacity_size_problem(s)
        if problem:
            raise CLIError(problem)
    if s.pool is None:
        s = replace(s, pool=s.requests)
    shaping = trace_shaping(s)
    if shaping and not s.trace:
        raise CLIError(f"{shaping[0]} shapes a trace replay: give --trace FILE too")
    if s.trace:
        problem = trace_problem(s)
        if problem:
            raise CLIError(problem)
    return s


def trace_problem(settings: RunnerSettings) -> str | None:
    """What makes ``--trace`` unplayable at these settings (one line naming file, line and field), or None."""
    s = settings
    try:
        trace = read_trace(s.trace, s.trace_format or "")
        window = trace.window(s.trace_start, s.trace_duration)
        check_lengths(trace.path, window, s.target.max_model_len)
    except DatasetError as exc:
        return str(exc)
    span = offsets(window[-1:], s.trace_start, s.time_scale)[0]
    if span >= s.cell_timeout:
        return (f"--trace {s.trace}: the replay's last request is due {span:g} s after its first, beyond "
                f"--cell-timeout {s.cell_timeout:g} s: raise --cell-timeout, or replay less (--trace-duration) "
                "or faster (--time-scale)")
    return None


def capacity_size_problem(settings: RunnerSettings) -> str | None:
    """Why no capacity step could ever hold at these settings, or None: a step's first look sends at least the
    requests a hold needs (:func:`llmload.core.sequential.look_sizes`), so only a target no count can show."""
    s = settings
    if requests_to_hold(s.slo_target, Budget(s.capacity_steps, s.capacity_looks).alpha) != float("inf"):
        return None
    return (f"--find-capacity: a step holds once its attainment is shown >= --slo-target {s.slo_target:g} % "
            f"with {CONFIDENCE * 100:g} % confidence over {s.capacity_steps} steps x {s.capacity_looks} looks; "
            "no number of requests can show it: lower --slo-target")
