"""The command lines' one error style and options declared on dataclasses (llmload.core.cliargs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import configargparse
import pytest

from llmload.core import cliargs
from llmload.core.cliargs import (CLIError, OneLineParser, add_options, env_name, fail, from_namespace, option,
                                  option_fields, positive_int, print_error, read_env)

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Small:
    """A small settings class: a typed number, a choice, a switch turned off, a renamed flag, a plain field."""

    workers: int = option(4, "worker count", type=positive_int, metavar="N")
    mode: str = option("fast", "how to run", choices=("fast", "slow"))
    cache: bool = option(True, "keep no cache", flag="--no-cache", action="store_false")
    wait_s: float = option(1.5, "seconds to wait (default: %(default)s s)", flag="--wait", type=float)
    label: str | None = option(None, "a name")
    derived: str = "not an option"


def test_fields_become_flags_with_their_one_default_and_help():
    parser = argparse.ArgumentParser(prog="x")
    add_options(parser, Small)
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    assert list(actions) == ["workers", "mode", "cache", "wait_s", "label"] == [f.name for f in option_fields(Small)]
    assert [a.option_strings[0] for a in actions.values()] == ["--workers", "--mode", "--no-cache", "--wait", "--label"]
    assert actions["workers"].help == "worker count (default: %(default)s)" and actions["workers"].metavar == "N"
    assert actions["wait_s"].help == "seconds to wait (default: %(default)s s)"  # it names its default itself
    assert actions["label"].help == "a name" and actions["cache"].help == "keep no cache"  # empty and switch: none
    assert from_namespace(Small, parser.parse_args([])) == Small()
    parsed = from_namespace(Small, parser.parse_args(["--workers", "2", "--mode", "slow", "--no-cache", "--wait",
                                                      "3", "--label", "a"]), derived="given")
    assert parsed == Small(workers=2, mode="slow", cache=False, wait_s=3.0, label="a", derived="given")


def test_the_environment_reads_as_the_flags_do():
    environ = {"APP_WORKERS": "2", "APP_MODE": "slow", "APP_CACHE": "off", "APP_WAIT_S": "3", "APP_LABEL": "a",
               "APP_DERIVED": "ignored", "APP_OTHER": "ignored"}
    assert [env_name(f, "APP_") for f in option_fields(Small)] == ["APP_WORKERS", "APP_MODE", "APP_CACHE",
                                                                   "APP_WAIT_S", "APP_LABEL"]
    from_env = Small(**read_env(Small, "APP_", environ))
    parser = argparse.ArgumentParser()
    add_options(parser, Small)
    assert from_env == from_namespace(Small, parser.parse_args(["--workers", "2", "--mode", "slow", "--no-cache",
                                                                "--wait", "3", "--label", "a"]))
    assert read_env(Small, "APP_", {"APP_WORKERS": ""}) == {}  # empty is unset
    # the environment as the flags' defaults (the server), and a mapping of some defaults (the benchmarks)
    parser = argparse.ArgumentParser()
    add_options(parser, Small, defaults=from_env)
    assert from_namespace(Small, parser.parse_args([])) == from_env
    parser = argparse.ArgumentParser()
    add_options(parser, Small, defaults={"workers": 8})
    assert parser.parse_args([]).workers == 8 and parser.parse_args([]).mode == "fast"
    assert [a.help for a in parser._actions if a.dest == "workers"] == ["worker count (default: %(default)s)"]


@pytest.mark.parametrize("environ, line", [
    ({"APP_WORKERS": "0"}, "APP_WORKERS='0': '0' is not an integer >= 1"),
    ({"APP_MODE": "medium"}, "APP_MODE='medium': 'medium' is not one of fast, slow"),
    ({"APP_CACHE": "maybe"}, "APP_CACHE='maybe': 'maybe' is not an on/off value"),
    ({"APP_WAIT_S": "soon"}, "APP_WAIT_S='soon': could not convert string to float: 'soon'"),
])
def test_a_bad_environment_value_names_its_variable(environ, line):
    with pytest.raises(CLIError) as caught:
        read_env(Small, "APP_", environ)
    assert str(caught.value).startswith(line)


def test_a_configargparse_parser_reads_the_environment_itself(monkeypatch):
    """Locust's parser (configargparse) gets each option's variable as its env_var, and reads it."""
    parser = configargparse.ArgumentParser()
    add_options(parser, Small, env_prefix="APP_")
    monkeypatch.setenv("APP_WORKERS", "3")
    monkeypatch.setenv("APP_MODE", "slow")
    assert from_namespace(Small, parser.parse_args([])) == Small(workers=3, mode="slow")
    assert "[env var: APP_WORKERS]" in parser.format_help()


def test_one_error_line_and_exit_code_2(capsys):
    assert print_error("bad input") == 2 and capsys.readouterr().err == "error: bad input\n"
    with pytest.raises(SystemExit) as stop:
        fail("no server", status=1)
    assert stop.value.code == 1 and capsys.readouterr().err == "error: no server\n"
    parser = OneLineParser(prog="python -m thing")
    add_options(parser, Small)
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--workers", "0"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == "error: argument --workers: '0' is not an integer >= 1\n"


def test_the_usage_line_names_the_program_as_started(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/llmload/runner/__main__.py"])
    assert OneLineParser(prog="python -m llmload.runner").format_usage().startswith("usage: python -m llmload.runner")
    monkeypatch.setattr(sys, "argv", ["llmload run"])  # as the llmload command calls its programs
    assert OneLineParser(prog="python -m llmload.runner").format_usage().startswith("usage: llmload run ")
    assert cliargs.program("python -m x") == "llmload run"


@pytest.mark.unit
def test_another_program_declares_chosen_options_once_on_a_plain_parser():
    """The runner takes the load generator's declarations of the options it passes on: same flag, default, type
    and help, without Locust's web-UI keywords; an unknown name is a programming error."""
    from llmload.loadgen.options import LoadSettings  # the real declarations, as the runner uses them

    parser = argparse.ArgumentParser()
    add_options(parser, LoadSettings, names=("cancel_rate", "time_scale"))
    assert vars(parser.parse_args([])) == {"cancel_rate": 0.0, "time_scale": 1.0}
    assert parser.parse_args(["--time-scale", "0.5"]).time_scale == 0.5
    with pytest.raises(SystemExit):
        parser.parse_args(["--cancel-rate", "2"])
    with pytest.raises(ValueError, match="declares no option nope"):
        add_options(argparse.ArgumentParser(), LoadSettings, names=("nope",))
