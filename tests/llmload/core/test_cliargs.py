"""The command lines' one error style and options declared on dataclasses (llmload.core.cliargs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class Levels:
    """Lists, an alias, a switch on, a borrowed option with a default of its own, a typed value with argument()."""

    levels: list[int] | None = option(None, "levels", aliases=("--parallel",), type=cliargs.int_list, metavar="LIST")
    quick: bool = option(False, "a switch", action="store_true")
    workers: int | None = cliargs.borrow(Small, "workers", default=None, note="; here: per level")
    cache: bool = cliargs.borrow(Small, "cache")
    slo: object = option(None, "targets", type=cliargs.slo, metavar="KEY=MS")
    rate: float = option(0.0, "a rate", type=float)


def test_aliases_borrowed_declarations_and_settings_said_back_as_flags():
    parser = OneLineParser(prog="x")
    add_options(parser, Levels)
    actions = {a.dest: a for a in parser._actions}
    assert actions["levels"].option_strings == ["--levels", "--parallel"]
    # the borrowed field: Small's flag, type, metavar and help, a default and a note of its own
    assert (actions["workers"].option_strings, actions["workers"].metavar, actions["workers"].default) == (
        ["--workers"], "N", None)
    assert actions["workers"].help == "worker count; here: per level"
    assert actions["cache"].option_strings == ["--no-cache"] and actions["cache"].default is True
    parsed = from_namespace(Levels, parser.parse_args(["--parallel", "1,4", "--quick", "--workers", "3",
                                                       "--no-cache", "--slo", "ttft=500", "--rate", "0.25"]))
    assert parsed.levels == [1, 4] and parsed.quick and parsed.workers == 3 and not parsed.cache
    argv = cliargs.to_argv(parsed)
    assert argv == ["--levels", "1,4", "--quick", "--workers", "3", "--no-cache", "--slo", "ttft=500",
                    "--rate", "0.25"]
    assert from_namespace(Levels, parser.parse_args(argv)) == parsed  # said back, read again: the same
    assert cliargs.to_argv(Levels()) == [] and cliargs.to_argv(Levels(rate=2.0), ["rate", "quick", "slo"]) == [
        "--rate", "2"]  # a switch off and None say nothing
    assert [cliargs.argument_text(v) for v in (0.1 + 0.2, 1e-7, 3.0, [1.5, 2])] == [
        "0.30000000000000004", "1e-07", "3", "1.5,2"]  # numbers exactly, as short as that allows


def options_file(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_options_file_gives_values_with_the_flags_types(tmp_path):
    parser = OneLineParser(prog="x")
    add_options(parser, Levels)
    add_options(parser, Small, names=("mode", "wait_s", "label"))  # workers and cache: Levels borrows them
    toml = options_file(tmp_path, "s.toml", 'parallel = [2, 8]\nquick = true\nno-cache = true\nslo = {ttft = 500, '
                                             'e2e = "4s"}\nrate = 1.5\nmode = "slow"\nwait = "2"\n')
    values = cliargs.read_options_file(toml, parser)
    assert values["levels"] == [2, 8] and values["quick"] is True and values["cache"] is False
    assert values["slo"].argument() == "ttft=500,e2e=4000" and values["rate"] == 1.5
    assert (values["mode"], values["wait_s"]) == ("slow", 2.0)
    as_json = options_file(tmp_path, "s.json", '{"levels": "2,8", "quick": "yes", "cache": false, "rate": 1.5}')
    assert cliargs.read_options_file(as_json, parser) == {"levels": [2, 8], "quick": True, "cache": False,
                                                          "rate": 1.5}
    # the command line wins over the file; what it leaves out the file gives
    given = options_file(tmp_path, "g.toml", 'rate = 3\nlevels = [5]\nlabel = "from-file"\n')
    parser.add_argument("--settings", type=Path, default=None)
    ns = cliargs.parse_with_file(parser, ["--settings", str(given), "--rate", "4"], "settings")
    assert (ns.rate, ns.levels, ns.label) == (4.0, [5], "from-file")


@pytest.mark.parametrize("text, name, line", [
    ("rates = 3\n", "s.toml", "s.toml: no option 'rates' (did you mean rate?)"),
    ("zzz = 3\n", "s.toml", "s.toml: no option 'zzz' (its keys are the option names of --help)"),
    ("workers = 0\n", "s.toml", "s.toml: workers: '0' is not an integer >= 1"),
    ("mode = 'medium'\n", "s.toml", "s.toml: mode: 'medium' is not one of fast, slow"),
    ("levels = [1, 0]\n", "s.toml", "s.toml: levels: '0' is not an integer >= 1 (in '1,0')"),
    ("quick = 'maybe'\n", "s.toml", "s.toml: quick: 'maybe' is not an on/off value"),
    ("rate = 'fast'\n", "s.toml", "s.toml: rate: could not convert string to float: 'fast'"),
    ("rate = [[1]]\n", "s.toml", "s.toml: rate: [[1]] is not a value a flag takes"),
    ("levels = [1]\nparallel = [2]\n", "s.toml", "s.toml: parallel and levels are the same option: give it once"),
    ("rate = \n", "s.toml", "s.toml: not valid TOML: "),
    ('{"rate": null}', "s.json", "s.json: rate: null is no value (leave the key out for the default)"),
    ('[1, 2]', "s.json", "s.json: expected a table of option = value, got list"),
    ('{"rate": ', "s.json", "s.json: not valid JSON: "),
    ("rate: 1\n", "s.yaml", "s.yaml: give a .toml or a .json file"),
])
def test_a_bad_options_file_is_one_line_naming_file_and_key(tmp_path, capsys, text, name, line):
    parser = OneLineParser(prog="x")
    add_options(parser, Levels)
    add_options(parser, Small, names=("mode",))
    parser.add_argument("--settings", type=Path, default=None)
    path = options_file(tmp_path, name, text)
    with pytest.raises(SystemExit) as stop:
        cliargs.parse_with_file(parser, ["--settings", str(path)], "settings")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: --settings {tmp_path / line}"), err
    with pytest.raises(SystemExit):
        cliargs.parse_with_file(parser, ["--settings", str(tmp_path / "missing.toml")], "settings")
    assert capsys.readouterr().err.startswith(f"error: --settings {tmp_path / 'missing.toml'}: cannot read it: No "
                                              "such file")
