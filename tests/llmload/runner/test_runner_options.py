"""The runner's options: defaults, aliases, and every bad input as one line with exit code 2 before anything starts."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from llmload.core.cliargs import CLIError, add_options, option_fields, to_argv
from llmload.core.metrics import SLO
from llmload.loadgen.options import LoadSettings
from llmload.runner.cli import parse_args
from llmload.runner.options import (FULL, GROUPS, PROFILES, QUICK, RunnerSettings, add_runner_options, build_parser,
                                    parse_settings, resolve)
from llmload.targets import TargetSettings, parse_targets
from llmload.tasks import default_task_names, task_names
from runner_helpers import error_line, run_runner


def error_of(argv: list[str], capsys) -> str:
    return error_line(parse_args, argv, capsys)


@pytest.mark.parametrize("argv, expected", [
    (["--rates", "0"], "argument --rates: '0' is not a number > 0"),
    (["--rates", "1,fast"], "argument --rates: 'fast' is not a number > 0"),
    (["--rates", "-2"], "argument --rates: '-2' is not a number > 0"),
    (["--arrival", "weibull"], "argument --arrival: invalid choice: 'weibull' (choose from"),
    (["--slo", "ttfx=5"], "argument --slo: 'ttfx=5' is not KEY=MS with KEY one of ttft, tpot, e2e, itl"),
    (["--slo", "ttft"], "argument --slo: 'ttft' is not KEY=MS"),
    (["--slo", "ttft=abc"], "argument --slo: ttft='abc': a target is a positive number of milliseconds"),
    (["--slo", "e2e=0"], "argument --slo: e2e='0': a target is a positive number"),
    (["--slo", "e2e=-5s"], "argument --slo: e2e='-5s': a target is a positive number"),
    (["--slo", "ttft=1,ttft=2"], "argument --slo: ttft is given twice"),
    (["--warmup", "9", "--requests", "8"], "--warmup 9 must be smaller than --requests (8)"),
    (["--warmup", "4", "--quick"], "--warmup 4 must be smaller than --requests (4)"),
    (["--find-capacity"], "--find-capacity needs --slo"),
    (["--baseline", "tgi"], "--baseline tgi is not among --servers (basic-naive, basic-batched, vllm)"),
    (["--servers", "mock", "--baseline", "vllm"], "--baseline vllm is not among --servers (mock)"),
    (["--servers", "tgi"], "argument --servers: unknown server 'tgi': choose from basic-naive"),
    (["--servers", "mock,mock"], "argument --servers: --servers names must be unique"),
    (["--tasks", "poetry"], f"argument --tasks: 'poetry' is not one of {', '.join(task_names())}"),
    (["--modes", "batch"], "argument --modes: 'batch' is not one of sync, stream"),
    (["--concurrency", "0"], "argument --concurrency/--parallel: '0' is not an integer >= 1"),
    (["--parallel", "1,x"], "argument --concurrency/--parallel: 'x' is not an integer >= 1"),
    (["--sweep", "0"], "argument --sweep: '0' is not an integer >= 1"),
    (["--pool", "0"], "argument --pool: '0' is not an integer >= 1"),
    (["--repeat", "0"], "argument --repeat: '0' is not an integer >= 1"),
    (["--slo-target", "0"], "argument --slo-target: '0' is not a percentage > 0 and <= 100"),
    (["--slo-target", "101"], "argument --slo-target: '101' is not a percentage > 0 and <= 100"),
    (["--max-lag", "0"], "argument --max-lag: '0' is not a duration > 0"),
    (["--burstiness", "0.5"], "--burstiness applies to --arrival gamma only (got --arrival poisson)"),
    (["--burstiness", "0"], "argument --burstiness: '0' is not a number > 0"),
    (["--cancel-rate", "-0.5"], "argument --cancel-rate: '-0.5' is not a share of requests in [0, 1]"),
    (["--cancel-rate", "0.3"], "--cancel-rate P and --cancel-after WHEN go together"),
    (["--cancel-rate", "0.3", "--cancel-after", "5tok", "--modes", "sync,stream"],
     "--cancel-after 5tok counts from the stream's tokens"),
    (["--throughput-only", "--modes", "stream"], "--throughput-only sends sync requests only"),
    (["--servers", "mock", "--price-per-hour", "mock=-1"],
     "argument --price-per-hour: mock: '-1' is not a price in USD per hour (a number > 0"),
    (["--servers", "mock", "--price-per-hour", "mock=cheap"], "argument --price-per-hour: mock: 'cheap' is not a price"),
    (["--servers", "mock", "--price-per-hour", "2.5"], "argument --price-per-hour: '2.5' is not NAME=USD"),
    (["--servers", "mock", "--price-per-hour", "vllm=2.5"],
     "--price-per-hour vllm: no server of that name among --servers (mock)"),
    (["--repeat", "-1"], "argument --repeat: '-1' is not an integer >= 1"),
    (["--repeat", "two"], "argument --repeat: 'two' is not an integer >= 1"),
    (["--slo-target", "abc"], "argument --slo-target: 'abc' is not a percentage > 0 and <= 100"),
    (["--slo-target", "-5"], "argument --slo-target: '-5' is not a percentage > 0 and <= 100"),
    (["--slo-target", "nan"], "argument --slo-target: 'nan' is not a percentage > 0 and <= 100"),
    (["--target-ci", "0"], "argument --target-ci: '0' is not a percentage > 0 and < 100"),
    (["--target-ci", "100"], "argument --target-ci: '100' is not a percentage > 0 and < 100"),
    (["--target-ci", "250"], "argument --target-ci: '250' is not a percentage > 0 and < 100"),
    (["--target-ci", "-3"], "argument --target-ci: '-3' is not a percentage > 0 and < 100"),
    (["--target-ci", "10%"], "argument --target-ci: '10%' is not a percentage > 0 and < 100"),
    (["--target-ci", "inf"], "argument --target-ci: 'inf' is not a percentage > 0 and < 100"),
    (["--repeat", "2", "--max-repeats", "3"], "--max-repeats applies with --target-ci only"),
    (["--target-ci", "10", "--max-repeats", "1"], "--max-repeats 1 must be at least 2: --target-ci judges"),
    (["--max-repeats", "2"], "--max-repeats 2 must be at least 3: --target-ci judges"),
    (["--target-ci", "10", "--repeat", "4", "--max-repeats", "3"], "--max-repeats 3 must be at least 4"),
    (["--max-repeats", "0"], "argument --max-repeats: '0' is not an integer >= 1"),
    (["--max-error-rate", "1.5"], "argument --max-error-rate: '1.5' is not a share of requests in [0, 1]"),
    (["--max-error-rate", "-0.1"], "argument --max-error-rate: '-0.1' is not a share of requests in [0, 1]"),
    (["--retry", "-1"], "argument --retry: '-1' is not an integer >= 0"),
    (["--retry-max-wait", "5"], "--retry-max-wait caps the waits of --retry: give --retry N too"),
    (["--order", "random"], "argument --order: invalid choice: 'random' (choose from"),
    (["--order-seed", "-1"], "argument --order-seed: '-1' is not an integer >= 0"),
    (["--max-servers-up", "-1"], "argument --max-servers-up: '-1' is not an integer >= 0"),
    (["--capacity-looks", "0"], "argument --capacity-looks: '0' is not an integer >= 1"),
    (["--find-capacity", "--slo", "e2e=300", "--slo-target", "100"],
     "--find-capacity: a step holds once its attainment is shown >= --slo-target 100 % with 95 % confidence over "
     "6 steps x 5 looks; no number of requests can show it: lower --slo-target"),
    (["--capacity-ci", "0"], "argument --capacity-ci: '0' is not a percentage > 0 and < 100"),
])
@pytest.mark.unit
def test_bad_input_is_one_line_naming_the_option(argv, expected, capsys):
    line = error_of(argv, capsys)
    assert line.startswith(f"error: {expected}"), line


def resolved(argv: list[str]):
    """The settings as the runner resolves them."""
    return parse_settings(argv)


@pytest.mark.unit
def test_slo_targets_take_milliseconds_or_a_unit():
    args = resolved(["--servers", "mock", "--slo", "ttft=500,tpot=50ms,e2e=4s,itl=0.2s", "--find-capacity"])
    assert args.slo == SLO(ttft=0.5, tpot=0.05, e2e=4.0, itl=0.2)
    assert args.slo_target == 99.0 and args.max_lag == 0.5 and args.capacity_steps == 6 and args.capacity_looks == 5


@pytest.mark.unit
def test_defaults_profiles_and_aliases():
    full = resolved([])
    assert [t.name for t in full.servers] == ["basic-naive", "basic-batched", "vllm"] and full.baseline == "vllm"
    assert full.tasks == list(default_task_names()) == ["qa", "code"]
    assert full.modes == ["stream"]
    assert (full.concurrency, full.requests, full.max_tokens, full.pool) == ([8], 48, 32, 48)
    assert (full.repeat, full.target_ci, full.max_repeats, full.order) == (3, 15.0, 5, "interleaved")
    quick = resolved(["--quick", "--servers", "naive,batched"])
    assert quick.tasks == ["chat", "qa"] and quick.concurrency == [1, 4] and quick.requests == 4
    assert (quick.repeat, quick.target_ci, quick.max_repeats) == (1, None, None)
    # the default repeats: --max-repeats alone caps them; --repeat or --target-ci, or open-loop levels only,
    # replace them
    assert (resolved(["--max-repeats", "8"]).repeat, resolved(["--max-repeats", "8"]).max_repeats) == (3, 8)
    assert (resolved(["--repeat", "2"]).repeat, resolved(["--repeat", "2"]).target_ci) == (2, None)
    only_ci = resolved(["--target-ci", "10"])
    assert (only_ci.repeat, only_ci.target_ci, only_ci.max_repeats) == (1, 10.0, 5)
    assert (resolved(["--rates", "2"]).repeat, resolved(["--rates", "2"]).target_ci) == (1, None)
    assert (resolved(["--rates", "2", "--concurrency", "8"]).target_ci) == 15.0
    assert [t.kind for t in quick.servers] == ["basic-naive", "basic-batched"] and quick.baseline is None
    assert resolved(["--parallel", "2,3"]).concurrency == [2, 3]  # the seed's name
    assert "--parallel is the seed's name" in " ".join(build_parser().format_help().split())
    # rates, sweeps and searches replace the default closed-loop levels, unless levels are given too
    assert resolved(["--rates", "1.5,3"]).concurrency == []
    assert resolved(["--rates", "1.5", "--concurrency", "2"]).concurrency == [2]
    assert resolved(["--sweep", "4", "--pool", "3"]).pool == 3
    assert resolved(["--throughput-only"]).modes == ["sync"]
    caching = resolved(["--servers", "mock,vllm", "--vllm-prefix-caching"])
    assert [(t.name, t.kind) for t in caching.servers] == [("mock", "mock"), ("vllm", "vllm-prefix-cache")]


@pytest.mark.integration
@pytest.mark.slow
def test_the_command_line_says_it_in_one_line(tmp_path):
    proc = run_runner("--tasks", "poetry", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: argument --tasks: 'poetry' is not one of {', '.join(task_names())} (in 'poetry')"]
    assert not (tmp_path / "x").exists()
    for bad in (["--target-ci", "100"], ["--repeat", "0"], ["--slo-target", "0"]):
        proc = run_runner(*bad, "--out", str(tmp_path / "z"))
        assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"error: argument {bad[0]}: ") and not (tmp_path / "z").exists()
    proc = run_runner("--servers", "basic-naive", "--model", "./models/not-there", "--out", str(tmp_path / "y"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: model: no model folder at ./models/not-there: pass a model folder or a Hugging Face id, or leave "
        "--model out to use the embedded default (materialised by `make model`)"]


@pytest.mark.unit
def test_a_trace_is_one_more_level_and_a_bad_one_is_one_line(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 900, "output_length": 9}\n'
                     '{"timestamp": 40, "input_length": 1500, "output_length": 600}\n')
    args = parse_args(["--servers", "mock", "--trace", str(trace), "--time-scale", "0.5", "--max-model-len", "4096"])
    assert args.tasks == ["synthetic"] and args.concurrency == [] and args.time_scale == 0.5
    assert parse_args(["--servers", "mock", "--trace", str(trace), "--tasks", "qa,chat", "--trace-duration",
                       "0.03"]).tasks == ["qa", "chat"]  # the window leaves the long request out
    assert error_of(["--servers", "mock", "--trace", str(trace)], capsys) == (
        f"error: {trace}:2: input_length + output_length: 1500 + 600 tokens exceed the model's context of 2048 "
        "(--max-model-len)")
    assert error_of(["--servers", "mock", "--trace", str(trace), "--max-model-len", "4096", "--time-scale", "30",
                     "--cell-timeout", "1"], capsys) == (
        f"error: --trace {trace}: the replay's last request is due 1.2 s after its first, beyond --cell-timeout 1 s: "
        "raise --cell-timeout, or replay less (--trace-duration) or faster (--time-scale)")
    assert error_of(["--servers", "mock", "--time-scale", "2"], capsys) == (
        "error: --time-scale shapes a trace replay: give --trace FILE too")
    assert error_of(["--servers", "mock", "--trace", str(tmp_path / "none.jsonl")], capsys).startswith(
        f"error: {tmp_path / 'none.jsonl'}: cannot read the trace: No such file")


def scenario(tmp_path, text: str, name: str = "s.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.unit
def test_a_scenario_file_gives_options_as_flags_would_and_the_command_line_wins(tmp_path):
    path = scenario(tmp_path, 'servers = "a=mock,b=mock"\nbaseline = "b"\ntasks = ["qa"]\nparallel = [1, 2]\n'
                              'requests = 6\nmax-tokens = 8\nslo = {ttft = 500, e2e = "4s"}\n'
                              'price_per_hour = {a = 0.4}\n'
                              'max_num_seqs = 4\nno_report = true\nrepeat = 2\n')
    s = parse_settings(["--scenario", path, "--requests", "9"])
    flags = parse_settings(["--servers", "a=mock,b=mock", "--baseline", "b", "--tasks", "qa", "--concurrency", "1,2",
                            "--requests", "9", "--max-tokens", "8", "--slo", "ttft=500,e2e=4s", "--price-per-hour",
                            "a=0.4", "--max-num-seqs", "4", "--no-report", "--repeat", "2"])
    assert s == RunnerSettings(**{**vars(flags), "scenario": Path(path)})  # the same settings, typed alike
    assert (s.requests, s.max_tokens, s.target.max_num_seqs, s.repeat, s.target_ci) == (9, 8, 4, 2, None)
    # a scenario's values count as given: --repeat in it replaces the profile's repeats, as the flag does
    quick = parse_settings(["--scenario", scenario(tmp_path, '{"quick": true, "servers": "mock"}', "q.json")])
    assert quick == replace(parse_settings(["--quick", "--servers", "mock"]), scenario=tmp_path / "q.json")
    assert parse_settings(["--scenario", path, "--baseline", "a"]).baseline == "a"


@pytest.mark.unit
@pytest.mark.parametrize("text, line", [
    ("reqests = 4\n", "no option 'reqests' (did you mean requests?)"),
    ("requests = 0\n", "requests: '0' is not an integer >= 1"),
    ("tasks = ['poetry']\n", f"tasks: 'poetry' is not one of {', '.join(task_names())} (in 'poetry')"),
    ("concurrency = [1, 'x']\n", "concurrency: 'x' is not an integer >= 1 (in '1,x')"),
    ("servers = 'tgi'\n", "servers: unknown server 'tgi'"),
    ("slo = {ttfx = 5}\n", "slo: 'ttfx=5' is not KEY=MS"),
    ("find_capacity = 'maybe'\n", "find_capacity: 'maybe' is not an on/off value"),
    ("arrival = 'weibull'\n", "arrival: 'weibull' is not one of constant, poisson, gamma"),
    ("target-ci = 100\n", "target-ci: '100' is not a percentage > 0 and < 100"),
    ("scenario = 'other.toml'\n", "scenario cannot be given in the file"),
    ("requests = \n", "not valid TOML: "),
])
def test_a_bad_scenario_is_one_line_naming_its_file_and_key(tmp_path, capsys, text, line):
    path = scenario(tmp_path, text)
    assert error_of(["--scenario", path], capsys).startswith(f"error: --scenario {path}: {line}")


@pytest.mark.unit
def test_a_scenarios_values_meet_the_same_checks_across_options(tmp_path, capsys):
    path = scenario(tmp_path, "warmup = 9\nrequests = 8\n")
    assert error_of(["--scenario", path], capsys) == "error: --warmup 9 must be smaller than --requests (8): at least " \
                                                     "one request of each cell must be measured"
    assert error_of(["--scenario", scenario(tmp_path, "find_capacity = true\n")], capsys).startswith(
        "error: --find-capacity needs --slo")


@pytest.mark.unit
def test_profiles_name_only_options_left_unset_and_hold_values_their_flags_take():
    """Every profile value is one of an option declared with a None default (so that 'not given' is seen), and
    reads back through its own flag's type."""
    declared = {f.name: f for f in option_fields(RunnerSettings)}
    parser = build_parser()
    for name, profile in PROFILES.items():
        for key, value in profile.items():
            assert key in declared and declared[key].default is None, (name, key)
            if value is not None:
                flags = to_argv(replace(RunnerSettings(), **{key: value}), [key])
                assert getattr(parser.parse_args(flags), key) == value, (name, key, flags)
    assert PROFILES["full"] is FULL and PROFILES["quick"] is QUICK


@pytest.mark.unit
def test_another_program_builds_the_settings_without_a_command_line_or_adds_the_options_to_its_own(capsys):
    """What llmload tune needs: the settings built directly and resolved as the command line's are, and the
    runner's option groups on a parser of its own."""
    direct = resolve(RunnerSettings(servers=parse_targets("mock"), tasks=["qa"], rates=[2.0], requests=6,
                                    slo=SLO(e2e=4.0)))
    assert direct == parse_settings(["--servers", "mock", "--tasks", "qa", "--rates", "2", "--requests", "6",
                                     "--slo", "e2e=4000"])
    assert (direct.concurrency, direct.repeat, direct.pool, direct.max_tokens) == ([], 1, 6, 32)
    with pytest.raises(CLIError, match="--find-capacity needs --slo"):
        resolve(replace(direct, find_capacity=True, slo=None))
    tuned = resolve(RunnerSettings(servers=parse_targets("vllm"), target=TargetSettings(max_num_seqs=16)))
    assert tuned.target.max_num_seqs == 16 and tuned.record()["max_num_seqs"] == 16
    parser = argparse.ArgumentParser(prog="tune")
    parser.add_argument("--grid")
    add_runner_options(parser, [g for g in GROUPS if g[0] != "the servers"])
    ns = parser.parse_args(["--grid", "x", "--rates", "1,2", "--max-tokens", "4"])
    settings = RunnerSettings.from_namespace(ns)
    assert (settings.rates, settings.max_tokens, settings.target) == ([1.0, 2.0], 4, TargetSettings())
    # run.json's settings: every option, by name, in --help's order
    record = parse_settings(["--servers", "mock"]).record()
    assert list(record) == [f.name for _, classes in GROUPS for cls in classes for f in option_fields(cls)
                            if f.name not in ("servers", "slo")]
    assert record["requests"] == 48 and record["model"] is None and record["scenario"] is None


@pytest.mark.unit
def test_options_shared_with_other_programs_are_their_declarations():
    """--max-tokens, --api, --seed, --warmup, --slo and the cancellation are the load generator's, --servers and
    --baseline the benchmarks' too: one flag, type and help each; the runner's own defaults come from its profile."""
    from benchmarks.server_throughput import build_parser as bench_parser  # benchmarks: for this check only

    def actions(parser):
        return {a.dest: a for a in parser._actions}

    runner, loadgen, bench = actions(build_parser()), argparse.ArgumentParser(), actions(bench_parser())
    add_options(loadgen, LoadSettings, names=[f.name for f in option_fields(LoadSettings)])  # a plain parser
    loadgen = actions(loadgen)
    for name in ("max_tokens", "api", "seed", "warmup", "slo", "cancel_rate", "cancel_after", "retry",
                 "retry_max_wait", "max_error_rate"):
        mine, theirs = runner[name], loadgen[name]
        assert (mine.option_strings, mine.type, mine.metavar, mine.choices) == (
            theirs.option_strings, theirs.type, theirs.metavar, theirs.choices), name
        assert mine.help.startswith(theirs.help.split(" (default")[0]), name
    assert (runner["max_tokens"].default, loadgen["max_tokens"].default) == (None, 0)  # the profile's: 32 or 16
    for name in ("servers", "baseline"):
        assert (runner[name].help, runner[name].type, runner[name].default) == (
            bench[name].help, bench[name].type, bench[name].default)
