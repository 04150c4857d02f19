"""``python -m llmload.runner``: parse and check the options, install the signal handling, run the matrix."""

from __future__ import annotations

import argparse
import sys

from llmload.runner.cell import loadgen_flags
from llmload.runner.interrupts import StopSignal
from llmload.runner.matrix import Runner, RunnerError
from llmload.runner.options import build_parser, open_loop, resolve


def needed_loadgen_flags(args: argparse.Namespace) -> dict[str, str]:
    """The load generator's options this run passes to Locust, each with the runner option that needs it."""
    needed = {}
    if open_loop(args):
        option = "--rates" if args.rates else "--sweep" if args.sweep else "--find-capacity"
        needed.update({"--rate": option, "--arrival": option, "--seed": option})
    if args.burstiness is not None:
        needed["--burstiness"] = "--burstiness"
    if args.warmup:
        needed["--warmup"] = "--warmup"
    return needed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parsed and checked options; a bad one ends the process with one ``error:`` line and exit code 2."""
    parser = build_parser()
    args = resolve(parser.parse_args(argv), parser)
    needed = needed_loadgen_flags(args)
    if needed:
        have = loadgen_flags()
        missing = [(flag, option) for flag, option in needed.items() if flag not in have]
        if missing:
            flag, option = missing[0]
            parser.error(f"{option} needs the load generator's {flag}, which `python -m llmload.loadgen` does not "
                         "list (update llmload/loadgen)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopSignal().install()
    try:
        return Runner(args, stop).run()
    except RunnerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        stop.uninstall()
