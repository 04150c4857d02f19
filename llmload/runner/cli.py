"""``python -m llmload.runner``: parse and check the options, install the signal handling, run the matrix."""

from __future__ import annotations

from llmload.core.cliargs import print_error
from llmload.runner.interrupts import StopSignal
from llmload.runner.matrix import Runner, RunnerError
from llmload.runner.options import RunnerSettings, parse_settings


def parse_args(argv: list[str] | None = None) -> RunnerSettings:
    """Parsed and checked options; a bad one ends the process with one ``error:`` line and exit code 2."""
    return parse_settings(argv)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    stop = StopSignal().install()
    try:
        return Runner(settings, stop).run()
    except RunnerError as exc:
        return print_error(str(exc))
    finally:
        stop.uninstall()
