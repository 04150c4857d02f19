"""``python -m llmload.runner``: parse and check the options, install the signal handling, run the matrix."""

from __future__ import annotations

import argparse

from llmload.core.cliargs import print_error
from llmload.runner.interrupts import StopSignal
from llmload.runner.matrix import Runner, RunnerError
from llmload.runner.options import build_parser, resolve


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parsed and checked options; a bad one ends the process with one ``error:`` line and exit code 2."""
    parser = build_parser()
    return resolve(parser.parse_args(argv), parser)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = StopSignal().install()
    try:
        return Runner(args, stop).run()
    except RunnerError as exc:
        return print_error(str(exc))
    finally:
        stop.uninstall()
