"""``llmload tune``'s command line: its configurations and their names, the runs' order, every bad input as one line
with exit code 2 before anything starts, and a folder made with other settings refused."""

from __future__ import annotations

import json

import pytest

from llmload.core.cliargs import CLIError
from llmload.core.runfiles import write_tune
from llmload.runner import tune as tune_module
from llmload.runner.grid import abbreviations, flag_pairs, flags_text, grid_axis, label
from llmload.runner.schedule import Order
from llmload.runner.tune import main, parse_tune
from llmload.targets import TargetSettings, get_kind
from runner_helpers import error_line

pytestmark = pytest.mark.unit

BASE = ["--slo", "e2e=4000", "--tasks", "qa", "--requests", "40", "--slo-target", "90"]


def error_of(argv: list[str], capsys) -> str:
    return error_line(main, argv, capsys)


@pytest.mark.parametrize("argv, expected", [
    (["--servers", "mock", "--grid", ""], "argument --grid: '' is not FLAG=V1,V2,..."),
    (["--servers", "mock", "--grid", "mock-slots"], "argument --grid: 'mock-slots' is not FLAG=V1,V2,..."),
    (["--servers", "mock", "--grid", "mock-slots="], "argument --grid: 'mock-slots=' is not FLAG=V1,V2,..."),
    (["--servers", "mock", "--grid", "mock-slots=1,,2"], "argument --grid: 'mock-slots=1,,2' has an empty value"),
    (["--servers", "mock", "--grid", "mock-slots=1,1"], "argument --grid: 'mock-slots=1,1' repeats a value"),
    (["--servers", "mock", "--grid", "=1,2"], "argument --grid: '=1,2' is not FLAG=V1,V2,..."),
    (["--servers", "mock", "--grid", "mock-slotz=1,2"],
     "mock: the basic server has no flag --mock-slotz (did you mean mock-slots?)"),
    (["--servers", "mock", "--grid", "mock-slots=1,two"], "mock: --mock-slots two: 'two' is not an integer >= 0"),
    (["--servers", "mock", "--grid", "port=1,2"], "mock: --port is the runner's to set, not a setting to tune"),
    (["--servers", "mock", "--grid", "max-num-seqs=4,16"], "mock: --max-num-seqs applies to the batched engine only"),
    (["--servers", "basic-batched", "--grid", "max-num-seqs=0,4"],
     "basic-batched: --max-num-seqs 0: '0' is not an integer >= 1"),
    (["--servers", "mock", "--vllm-args-set", "--max-num-seqs 4"],
     "--vllm-args-set: no server of --servers takes these flags (they are for vllm)"),
    (["--servers", "mock", "--vllm-args-set", ""], "argument --vllm-args-set: empty: give the configuration's flags"),
    (["--servers", "mock", "--vllm-args-set", "max-num-seqs 4"], "argument --vllm-args-set: 'max-num-seqs' in"),
    (["--servers", "mock", "--vllm-args-set", "--enforce-eager '"], "argument --vllm-args-set: \"--enforce-eager '\""),
    (["--servers", "mock", "--max-error-rate", "1.5"],
     "argument --max-error-rate: '1.5' is not a share of requests in [0, 1] (e.g. 0.3)"),
    (["--servers", "mock", "--max-error-rate", "-0.1"], "argument --max-error-rate: '-0.1' is not a share of requests in [0, 1] (e.g. 0.3)"),
    (["--servers", "mock", "--target-ci", "10"], "--target-ci: a tune repeats whole configurations"),
    (["--servers", "mock", "--baseline", "mock"], "--baseline: a tune ranks its configurations"),
    (["--servers", "a=http://127.0.0.1:9"], "--servers a=http://127.0.0.1:9: a tune starts and stops"),
    (["--grid", "mock-slots=1,2"], "name the servers whose configurations to compare: --servers"),
])
def test_bad_input_is_one_line_before_anything_starts(argv, expected, capsys, tmp_path):
    line = error_of([*BASE, *argv, "--out", str(tmp_path / "t")], capsys)
    assert line.startswith(f"error: {expected}"), line
    assert not (tmp_path / "t").exists()  # nothing started, nothing written


def test_without_an_slo_there_is_no_capacity_to_rank(capsys, tmp_path):
    line = error_of(["--servers", "mock", "--out", str(tmp_path / "t")], capsys)
    assert line.startswith("error: llmload tune ranks configurations by their capacity at an SLO: give --slo")


@pytest.mark.parametrize("text, line", [
    ("[]", "no configurations in it"),
    ("{}", "no configurations in it"),
    ("[1]", "configuration 1: expected a table of flag = value, got int"),
    ('[{"max-num-seqs": 4}]', "configuration 1: give its server (server = \"basic-batched\")"),
    ('{"a": {"server": "tgi"}}', "unknown server 'tgi'"),
    ('{"a": {"server": "mock", "mock-slots": [1, 2]}}', "configuration a: mock-slots = [1, 2] is not a flag's value"),
    ('{"a": {"server": "mock", "mock-slots": 1}, "b": {"server": "mock", "nope": 2}}',
     "mock: the basic server has no flag --nope"),
    ("[{", "not valid JSON"),
    ("42", "expected a list of configurations or a table of named ones"),
])
def test_a_bad_grid_file_is_one_line_naming_it(text, line, capsys, tmp_path):
    path = tmp_path / "grid.json"
    path.write_text(text)
    got = error_of([*BASE, "--grid-file", str(path), "--out", str(tmp_path / "t")], capsys)
    assert line in got and (str(path) in got or "--grid-file" in got or "mock:" in got), got


def test_grid_and_vllm_sets_cross_the_servers_with_short_names(tmp_path):
    tune = parse_tune([*BASE, "--servers", "basic-batched,vllm", "--grid", "max-num-seqs=4,16,32",
                       "--vllm-args-set=--max-num-seqs 4", "--vllm-args-set=--max-num-seqs 16 --enforce-eager",
                       "--vllm-args=--enforce-eager", "--out", str(tmp_path / "t")]) \
        if get_kind("vllm").unavailable() is None else None
    if tune is None:
        pytest.skip("vLLM is not installed")
    assert [c.name for c in tune.configurations] == [
        "basic-batched[mns=4]", "basic-batched[mns=16]", "basic-batched[mns=32]", "vllm[mns=4]",
        "vllm[mns=16,ee]"]
    batched = tune.configurations[1]
    assert batched.settings.max_num_seqs == 16 and batched.settings.extra_args == ()
    assert "--max-num-seqs" in get_kind("basic-batched").command(batched.settings, 8000)
    last = tune.configurations[-1]
    assert last.settings.vllm_args == ("--enforce-eager", "--max-num-seqs", "16", "--enforce-eager")
    assert last.folder == "vllm-mns=16,ee" and batched.folder == "basic-batched-mns=16"
    assert tune.blocks == 1 and tune.settings.find_capacity and tune.settings.repeat == 1


def test_every_basic_flag_is_read_as_the_server_reads_it(tmp_path):
    tune = parse_tune([*BASE, "--servers", "mock", "--grid", "mock-slots=1,2", "--grid", "mock-ttft-ms=50,100",
                       "--repeat", "3", "--out", str(tmp_path / "t")])
    assert [c.name for c in tune.configurations] == ["mock[ms=1,mtm=50]", "mock[ms=1,mtm=100]",
                                                     "mock[ms=2,mtm=50]", "mock[ms=2,mtm=100]"]
    first = tune.configurations[0]
    assert first.settings.mock_ttft_ms == 50.0 and first.settings.extra_args == ("--mock-slots", "1")
    command = get_kind("mock").command(first.settings, 8000)
    assert command[-2:] == ["--mock-slots", "1"] and command[command.index("--mock-ttft-ms") + 1] == "50"
    assert tune.blocks == 3
    run = tune.run_settings(first, tmp_path / "r")
    assert run.repeat == 1 and run.servers[0].name == "mock[ms=1,mtm=50]" and run.target is first.settings
    assert run.no_report and run.out == tmp_path / "r"
    # a switch of the basic server, off: its --no- form
    plain = get_kind("basic-batched").tuned(TargetSettings(), [("prepack-weights", "off")])
    assert plain.extra_args == ("--no-prepack-weights",)


def test_a_grid_file_names_its_configurations(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[[configs]]\nserver = "mock"\nname = "one-slot"\nmock-slots = 1\n\n'
                    '[[configs]]\nserver = "mock"\nmock-slots = 2\nmock-itl-ms = 5.5\n')
    tune = parse_tune([*BASE, "--grid-file", str(path), "--out", str(tmp_path / "t")])
    assert [c.name for c in tune.configurations] == ["mock[one-slot]", "mock[ms=2,mim=5.5]"]
    assert tune.configurations[1].settings.mock_itl_ms == 5.5
    named = tmp_path / "grid.json"
    named.write_text(json.dumps({"a": {"server": "mock", "mock-slots": 3}}))
    both = parse_tune([*BASE, "--servers", "mock", "--grid-file", str(named), "--out", str(tmp_path / "t")])
    assert [c.name for c in both.configurations] == ["mock", "mock[a]"]


def test_flag_sets_names_and_texts():
    assert grid_axis("max-num-seqs=4, 16") == ("max-num-seqs", ("4", "16"))
    pairs = flag_pairs("--max-num-seqs 16 --enforce-eager --kv-cache-dtype=fp8 --seed -1")
    assert pairs == (("max-num-seqs", "16"), ("enforce-eager", True), ("kv-cache-dtype", "fp8"), ("seed", "-1"))
    assert flags_text(pairs) == "--max-num-seqs 16 --enforce-eager --kv-cache-dtype fp8 --seed -1"
    assert abbreviations(["max-num-seqs", "mock-slots", "dtype"]) == {"max-num-seqs": "mns", "mock-slots": "ms",
                                                                      "dtype": "dtype"}
    assert abbreviations(["mock-slots", "max-seqs"]) == {"mock-slots": "mock-slots", "max-seqs": "max-seqs"}
    assert label([("a-b", True), ("c-d", False), ("x", "1/2 3")], {"a-b": "ab", "c-d": "cd"}) == "ab,no-cd,x=1_2_3"
    with pytest.raises(CLIError, match="--model is the runner's to set"):
        get_kind("vllm").tuned(TargetSettings(), [("model", "x")])


def test_the_runs_order_is_seeded_blocks_or_each_in_turn():
    names = ["a", "b", "c"]
    runs = Order("interleaved", 7).runs(names, 3)
    assert len(runs) == 9 and [b for _, b in runs] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert all(sorted(n for n, b in runs if b == k) == names for k in (1, 2, 3))
    assert runs == Order("interleaved", 7).runs(names, 3)  # the seed decides it
    assert any(Order("interleaved", s).runs(names, 3) != runs for s in range(3))
    assert Order("sequential").runs(names, 2) == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("c", 1), ("c", 2)]


def test_a_folder_of_another_tune_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "t"
    argv = [*BASE, "--servers", "mock", "--grid", "mock-slots=1,2", "--out", str(folder)]
    tune = parse_tune(argv)
    write_tune(folder, {"key": tune.key(), "argv": argv, "runs": []})
    monkeypatch.setattr(tune_module.TuneRun, "run_one", lambda *a: pytest.fail("a run started"))
    other = [*BASE, "--servers", "mock", "--grid", "mock-slots=1,3", "--out", str(folder)]
    assert main(other) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {folder} holds a tune made with other settings "
                                               "(configurations differs): give another --out, or go on with it")
    assert main([*BASE, "--servers", "mock", "--grid", "mock-slots=1,2", "--requests", "50", "--out",
                 str(folder)]) == 2
    assert "(runner.requests differs)" in capsys.readouterr().err
    # --resume takes the folder's own command line, and nothing beside it
    assert error_of(["--resume", str(folder), "--requests", "8"], capsys).startswith(
        "error: --resume DIR goes on with the settings the tune was started with: give no other option")
    assert error_of(["--resume", str(tmp_path / "none")], capsys).startswith("error: --resume: ")
    resumed = parse_tune(["--resume", str(folder)])
    assert resumed.key() == tune.key() and resumed.out == folder
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "file").write_text("x")
    assert main([*BASE, "--servers", "mock", "--out", str(tmp_path / "junk")]) == 2
    assert "holds something else than a tune" in capsys.readouterr().err


def test_a_scenario_gives_the_runners_options_not_the_tunes(tmp_path, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text('requests = 50\ntasks = ["qa"]\n')
    tune = parse_tune(["--scenario", str(scenario), "--servers", "mock", "--slo", "e2e=4000", "--slo-target", "90",
                       "--out", str(tmp_path / "t")])
    assert tune.settings.requests == 50 and tune.settings.tasks == ["qa"]
    scenario.write_text('grid = "mock-slots=1,2"\n')
    line = error_of(["--scenario", str(scenario), "--servers", "mock", *BASE], capsys)
    assert line == f"error: --scenario {scenario}: grid cannot be given in the file"
