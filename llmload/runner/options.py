"""The runner's command line: every option and its default (written once, here), and the checks across options.

Every bad input ends the runner before anything starts with one line,
``error: argument --x: ...`` or ``error: --x ...``, and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from llmload.core.cliargs import (OneLineParser, add_options, choice_list, duration, float_list, int_list,
                                  non_negative_int, number, positive_float, positive_int)
from llmload.core.cliargs import slo as slo_type
from llmload.core.cancel import parse_cancel_after
from llmload.core.cost import prices
from llmload.core.metrics import APIS, MODES, SLO
from llmload.tasks import DatasetError, default_task_names, task_names
from llmload.tasks.traces import check_lengths, offsets, read_trace
from llmload.core.sequential import CONFIDENCE, Budget, requests_to_hold
from llmload.loadgen.options import ARRIVALS, TRACE_SHAPING, LoadSettings, trace_shaping
from llmload.runner.capacity import CI_PCT as CAPACITY_CI
from llmload.runner.schedule import ORDERS
from llmload.targets import DEFAULT_BASELINE, KINDS, TargetSettings, targets_type

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
FULL = dict(servers="basic-naive,basic-batched,vllm", tasks=None, modes=["stream"], concurrency=[8],
            requests=48, max_tokens=32, repeat=3, target_ci=15.0, max_repeats=5)
QUICK = dict(tasks=["chat", "qa"], concurrency=[1, 4], requests=4, max_tokens=16, repeat=1, target_ci=None,
             max_repeats=None)
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
SLO_KEYS = SLO.KEYS
#: The load generator's options the runner passes on to every cell, declared once in :class:`LoadSettings`.
CANCEL_OPTIONS = ("cancel_rate", "cancel_after")


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


def build_parser() -> OneLineParser:
    kinds = ", ".join(k for k in KINDS if k != "url")
    p = OneLineParser(
        prog="python -m llmload.runner",
        description="Run the comparison matrix (servers x tasks x modes x load levels) with Locust and the resource "
                    "monitor, then merge the results into a report. Defaults: the embedded model, "
                    f"{FULL['servers']}, the tasks {','.join(list(default_task_names()))}, mode {','.join(FULL['modes'])}, "
                    "concurrency "
                    f"{','.join(map(str, FULL['concurrency']))}, {FULL['requests']} requests of {FULL['max_tokens']} "
                    f"tokens per cell, {FULL['repeat']} to {FULL['max_repeats']} interleaved repeats of each level "
                    f"until its headline intervals are within +-{FULL['target_ci']:g} %. See docs/runner.md.",
        epilog="Progress: one line per cell, '[done/total] server task mode level: figures (cell seconds); about N "
               "min left'. The time left is the mean time of the cells done so far times the cells left, plus the "
               "mean server start-up so far times the start-ups still expected. SIGINT or SIGTERM (to the runner or "
               "its process group) stops Locust first, gracefully, then the server; the cell is recorded as "
               "interrupted, a partial report is made, and the exit code is 130 (SIGINT) or 143 (SIGTERM).")
    matrix = p.add_argument_group("the matrix")
    matrix.add_argument("--quick", action="store_true",
                        help=f"small matrix: tasks {','.join(QUICK['tasks'])}, concurrency "
                             f"{','.join(map(str, QUICK['concurrency']))}, {QUICK['requests']} requests, "
                             f"{QUICK['max_tokens']} tokens (a few minutes)")
    matrix.add_argument("--servers", type=targets_type, default=None, metavar="LIST",
                        help=f"comma list of server kinds to start ({kinds}; aliases basic, naive, batched, "
                             "batched-plain), NAME=KIND to start a kind under another name, or NAME=URL for a server "
                             f"already running (default: {FULL['servers']})")
    matrix.add_argument("--baseline", default=None, metavar="NAME",
                        help=f"the server every ratio is taken against, baseline / server (default: "
                             f"{DEFAULT_BASELINE}, when it is among --servers)")
    matrix.add_argument("--tasks", type=choice_list(task_names(), "tasks"), default=None, metavar="LIST",
                        help=f"comma list of {', '.join(task_names())} (default: {','.join(list(default_task_names()))})")
    matrix.add_argument("--modes", type=choice_list(MODES, "modes"), default=None, metavar="LIST",
                        help=f"comma list of sync, stream (default: {','.join(FULL['modes'])})")
    matrix.add_argument("--concurrency", "--parallel", dest="concurrency", type=int_list, default=None,
                        metavar="LIST",
                        help="closed-loop levels: comma list of concurrent users, each sending its next request when "
                             f"the last one ends (default: {','.join(map(str, FULL['concurrency']))}, unless --rates, "
                             "--sweep or --find-capacity is given; --parallel is the seed's name for it)")
    matrix.add_argument("--requests", type=positive_int, default=None, metavar="N",
                        help=f"requests per cell, warm-up included (default: {FULL['requests']}; a closed-loop cell "
                             "sends at least its concurrency)")
    matrix.add_argument("--max-tokens", type=non_negative_int, default=None, metavar="N",
                        help=f"output tokens per request, fixed with ignore_eos (default: {FULL['max_tokens']}; "
                             "0 = each prompt's own task budget)")
    matrix.add_argument("--api", choices=APIS, default="chat", help="API style: completion, chat or responses "
                        "(/v1/responses, the Responses API) (default: %(default)s)")
    matrix.add_argument("--repeat", type=positive_int, default=None, metavar="R",
                        help="run every cell R times, each repeat in its own block of the order (the report "
                             "combines the repeats; with --target-ci: the fewest repeats). Default: "
                             f"--repeat {FULL['repeat']} --target-ci {FULL['target_ci']:g} --max-repeats "
                             f"{FULL['max_repeats']} (--max-repeats alone changes the cap); --repeat 1 when "
                             "--target-ci is given alone, with --quick, or with open-loop levels only")
    matrix.add_argument("--target-ci", type=percentage(include_100=False), default=None, metavar="PCT",
                        help="repeat each level until the 95 %% intervals of its headline figures (output tok/s; "
                             "TTFT p50 when streaming), over its repeats, are within +-PCT %% of their values, "
                             "at least max(--repeat, 2) and at most --max-repeats times; converged levels drop out "
                             "of the next blocks")
    matrix.add_argument("--max-repeats", type=positive_int, default=None, metavar="N",
                        help=f"with --target-ci: the most repeats of a level (default: {DEFAULT_MAX_REPEATS})")
    matrix.add_argument("--throughput-only", action="store_true",
                        help="request and token throughput per level only: sync requests, no per-token timing "
                             "(as the seed's option did)")
    matrix.add_argument("--warmup", type=non_negative_int, default=0, metavar="N",
                        help="the first N requests of every cell are sent but left out of its figures "
                             "(default: %(default)s; must be smaller than --requests)")

    load = p.add_argument_group("open loop: offered rates, sweeps and capacity")
    load.add_argument("--rates", type=float_list, default=None, metavar="LIST",
                      help="open-loop levels: comma list of offered request rates (req/s over the whole cell), "
                           "instead of or beside --concurrency")
    load.add_argument("--sweep", type=positive_int, default=None, metavar="N",
                      help="measure each server's saturation throughput (a closed loop at --pool users), then run N "
                           "rates evenly spaced up to it (saturation x 1/N, 2/N, ..., 1), as GuideLLM's sweep does")
    load.add_argument("--find-capacity", action="store_true",
                      help="per server, task and mode: the highest rate whose SLO attainment stays at or above "
                           "--slo-target with dispatch lag p99 under --max-lag, searched from the saturation "
                           "throughput until its 95 %% interval is within --capacity-ci (needs --slo; written to "
                           "capacity.jsonl with its interval)")
    load.add_argument("--capacity-steps", type=positive_int, default=DEFAULT_CAPACITY_STEPS, metavar="N",
                      help="most rates one capacity search tries (default: %(default)s)")
    load.add_argument("--capacity-looks", type=positive_int, default=DEFAULT_CAPACITY_LOOKS, metavar="N",
                      help="most cells one capacity step runs before it decides: --requests (at least the requests "
                           "a hold needs at --slo-target), then twice as many as the cell before, while the step is "
                           "undecided (default: %(default)s)")
    load.add_argument("--capacity-ci", type=percentage(include_100=False), default=CAPACITY_CI, metavar="PCT",
                      help="a capacity search stops once the capacity's 95 %% interval is within +-PCT %% of its "
                           "centre (default: %(default)s)")
    load.add_argument("--slo", type=slo_type, default=None, metavar="KEY=MS,...",
                      help=f"latency targets a request must all meet, keys {', '.join(SLO_KEYS)}, values in ms (or "
                           "500ms, 0.5s), e.g. ttft=500,e2e=4000; open-loop latencies count from the intended start")
    load.add_argument("--slo-target", type=percent_type, default=DEFAULT_SLO_TARGET, metavar="PCT",
                      help="share of requests that must meet --slo for a rate to hold, shown with 95 %% "
                           "confidence (default: %(default)s %%)")
    load.add_argument("--max-lag", type=duration("ms"), default=DEFAULT_MAX_LAG_S, metavar="MS",
                      help=f"dispatch lag p99 above which a capacity step fails: the load generator could not keep "
                           f"the schedule (default: {DEFAULT_MAX_LAG_S * 1000:g} ms)")
    load.add_argument("--pool", type=positive_int, default=None, metavar="N",
                      help="most requests in flight in an open-loop cell (Locust's -u there) and the users of the "
                           "saturation run (default: --requests, i.e. no bound within a cell)")
    load.add_argument("--arrival", choices=ARRIVALS, default=DEFAULT_ARRIVAL,
                      help="how open-loop requests are spaced (default: %(default)s, as vllm bench serve)")
    load.add_argument("--burstiness", type=positive_float, default=None, metavar="K",
                      help="--arrival gamma only: the gamma shape (1 = Poisson, < 1 burstier, > 1 steadier)")
    load.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                      help="seed of the arrival schedule and of the cancelled requests, the same for every server "
                           "(default: %(default)s)")
    add_options(load, LoadSettings, names=CANCEL_OPTIONS)  # declared once, by the load generator

    trace = p.add_argument_group("trace replay (docs/traces.md)")
    trace.add_argument("--trace", type=Path, default=None, metavar="FILE",
                       help="one more level per server and mode: replay this trace (each request at its time with its "
                            "lengths, under the first of --tasks, synthetic by default; --pool bounds the requests "
                            "in flight); its cells are phase 'trace'")
    add_options(trace, LoadSettings, names=TRACE_SHAPING)

    servers = p.add_argument_group("the servers")
    add_options(servers, TargetSettings)
    servers.add_argument("--vllm-prefix-caching", action="store_true",
                         help="start vllm with automatic prefix caching, as the vllm-prefix-cache kind (off by default: "
                              "every cell sends its task's prompts from the first one, and the basic server has no "
                              "prefix cache, so vLLM would skip prefills the others do)")
    servers.add_argument("--price-per-hour", type=prices, default=None, metavar="NAME=USD,...",
                         help="each server's price in USD per hour, by name (e.g. vllm=2.5,basic-batched=0.4): the "
                              "report gives $ per 1M output tokens and per 1,000 requests at each cell's throughput "
                              "and at the capacity found (default: none)")

    run = p.add_argument_group("the run")
    run.add_argument("--order", choices=ORDERS, default=ORDERS[0],
                     help="interleaved: blocks of one repeat of every level of every server, each block in a "
                          "random order drawn from --order-seed, so that drift over time spreads over every "
                          "server; sequential: each server in turn, each level's repeats in a row (default: "
                          "%(default)s)")
    run.add_argument("--order-seed", type=non_negative_int, default=0, metavar="N",
                     help="seed of the interleaved order (default: %(default)s)")
    run.add_argument("--max-servers-up", type=non_negative_int, default=0, metavar="N",
                     help="most started servers up at once (default: 0 = as many as the memory holds; 1 = one "
                          "at a time, each block's cells grouped by server)")
    run.add_argument("--cell-timeout", type=positive_float, default=600.0, metavar="S",
                     help="seconds after which one Locust cell is stopped and marked failed (default: %(default)s)")
    run.add_argument("--on-error", choices=("continue", "stop"), default="continue",
                     help="after a failed cell or server: go on with the next, or stop the run (default: %(default)s)")
    run.add_argument("--data-dir", type=Path, default=None,
                     help="folder of ready prompt sets <task>.jsonl, used as they are (default: datasets/data, "
                          "built or rebuilt for the model when missing or stale)")
    run.add_argument("--out", type=Path, default=None, help="run folder (default: results/<timestamp>)")
    run.add_argument("--no-report", action="store_true", help="skip the merge at the end")
    return p


def open_loop(args: argparse.Namespace) -> bool:
    """True when the run has open-loop cells (rates, a sweep, a capacity search or a trace)."""
    return bool(args.rates or args.sweep or args.find_capacity or getattr(args, "trace", None))


def resolve(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Fill the profile's defaults into unset options and check the options against each other.

    Errors go through ``parser.error`` (one line, exit code 2); without a parser they raise ValueError.
    """
    def fail(message: str):
        if parser is not None:
            parser.error(message)
        raise ValueError(message)

    explicit_modes = args.modes is not None
    profile = {**FULL, **(QUICK if args.quick else {})}
    if args.concurrency is None and open_loop(args):
        profile["concurrency"] = []  # rates, sweeps and searches replace the default closed-loop levels
    if profile["concurrency"] == [] or any(getattr(args, key) is not None for key in REPEAT_SIZING):
        profile.update(repeat=1, target_ci=None, max_repeats=None)  # one run per cell unless asked otherwise
    profile["tasks"] = profile["tasks"] or (["synthetic"] if args.trace else list(default_task_names()))
    for key, value in profile.items():
        if getattr(args, key) is None:
            setattr(args, key, targets_type(value) if key == "servers" else value)
    if args.vllm_prefix_caching:
        args.servers = [dataclasses.replace(t, kind="vllm-prefix-cache") if t.kind == "vllm" else t for t in args.servers]
    names = [t.name for t in args.servers]
    if args.baseline is None:
        args.baseline = DEFAULT_BASELINE if DEFAULT_BASELINE in names else None
    elif args.baseline not in names:
        fail(f"--baseline {args.baseline} is not among --servers ({', '.join(names)})")
    unpriced = [name for name in (getattr(args, "price_per_hour", None) or {}) if name not in names]
    if unpriced:
        fail(f"--price-per-hour {unpriced[0]}: no server of that name among --servers ({', '.join(names)})")
    if args.throughput_only:
        if explicit_modes and "stream" in args.modes:
            fail("--throughput-only sends sync requests only: leave --modes out or give --modes sync")
        args.modes = ["sync"]
    if args.warmup and args.warmup >= args.requests:
        fail(f"--warmup {args.warmup} must be smaller than --requests ({args.requests}): at least one request "
             "of each cell must be measured")
    if args.find_capacity and args.slo is None:
        fail("--find-capacity needs --slo, the targets a rate must hold (e.g. --slo ttft=500,e2e=4000)")
    if bool(args.cancel_rate) != bool(args.cancel_after):
        fail("--cancel-rate P and --cancel-after WHEN go together (e.g. --cancel-rate 0.3 --cancel-after ttft+1s)")
    if args.cancel_after and parse_cancel_after(args.cancel_after).needs_stream and "sync" in (args.modes or ()):
        fail(f"--cancel-after {args.cancel_after} counts from the stream's tokens: use --modes stream, or a time "
             "after the send (e.g. 2s)")
    if args.burstiness is not None and args.arrival != "gamma":
        fail(f"--burstiness applies to --arrival gamma only (got --arrival {args.arrival})")
    if args.max_repeats is not None and args.target_ci is None:
        fail("--max-repeats applies with --target-ci only (without it every level runs --repeat times)")
    if args.target_ci is not None:
        args.max_repeats = args.max_repeats or max(DEFAULT_MAX_REPEATS, args.repeat)
        fewest = max(args.repeat, 2)
        if args.max_repeats < fewest:
            fail(f"--max-repeats {args.max_repeats} must be at least {fewest}: --target-ci judges a level on "
                 f"max(--repeat, 2) repeats at least")
    if args.find_capacity:
        problem = capacity_size_problem(args)
        if problem:
            fail(problem)
    if args.pool is None:
        args.pool = args.requests
    shaping = trace_shaping(args)
    if shaping and not args.trace:
        fail(f"{shaping[0]} shapes a trace replay: give --trace FILE too")
    if args.trace:
        problem = trace_problem(args)
        if problem:
            fail(problem)
    return args


def trace_problem(args: argparse.Namespace) -> str | None:
    """What makes ``--trace`` unplayable at these settings (one line naming file, line and field), or None."""
    try:
        trace = read_trace(args.trace, args.trace_format or "")
        window = trace.window(args.trace_start, args.trace_duration)
        check_lengths(trace.path, window, args.max_model_len)
    except DatasetError as exc:
        return str(exc)
    span = offsets(window[-1:], args.trace_start, args.time_scale)[0]
    if span >= args.cell_timeout:
        return (f"--trace {args.trace}: the replay's last request is due {span:g} s after its first, beyond "
                f"--cell-timeout {args.cell_timeout:g} s: raise --cell-timeout, or replay less (--trace-duration) "
                "or faster (--time-scale)")
    return None


def capacity_size_problem(args: argparse.Namespace) -> str | None:
    """Why no capacity step could ever hold at these settings, or None: a step's first look sends at least the
    requests a hold needs (:func:`llmload.core.sequential.look_sizes`), so only a target no count can show."""
    if requests_to_hold(args.slo_target, Budget(args.capacity_steps, args.capacity_looks).alpha) != float("inf"):
        return None
    return (f"--find-capacity: a step holds once its attainment is shown >= --slo-target {args.slo_target:g} % "
            f"with {CONFIDENCE * 100:g} % confidence over {args.capacity_steps} steps x {args.capacity_looks} looks; "
            "no number of requests can show it: lower --slo-target")
