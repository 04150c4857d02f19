"""Typed settings from parsed options: value checks, defaults, contradictions, and where the files go."""

import argparse
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.core.cliargs import env_name
from llmload.core.paths import dataset_path
from llmload.loadgen.options import ENV_PREFIX, LoadSettings, SettingsError, ramp_type, slo_type, stages_type

pytestmark = pytest.mark.unit


def test_defaults_without_options():
    s = LoadSettings.from_options(None)
    assert (s.params.api, s.params.mode, s.params.max_tokens, s.params.temperature) == ("chat", "stream", None, 0.0)
    assert s.dataset_for("qa") == dataset_path("qa") and s.raw_log_path is None and s.monitor_path is None
    assert not s.open_loop and s.slo is None and s.shape is None
    s.check()


def test_files_follow_the_csv_prefix_or_the_raw_log():
    options = SimpleNamespace(csv_prefix="out/run1", raw_log="ignored.jsonl", max_tokens=0, mode="sync",
                              api="completion")
    s = LoadSettings.from_options(options)
    assert s.raw_log_path == Path("out/run1_requests.jsonl") and s.monitor_path == Path("out/run1_monitor.csv")
    assert s.summary_path == Path("out/run1_summary.json")
    assert s.params.mode == "sync" and s.params.path == "/v1/completions" and s.params.max_tokens is None
    s = LoadSettings.from_options(SimpleNamespace(raw_log="logs/cell_requests.jsonl", dataset="p.jsonl"))
    assert s.monitor_path == Path("logs/cell_monitor.csv") and s.dataset_for("chat") == Path("p.jsonl")
    assert LoadSettings.from_options(SimpleNamespace(raw_log="a/raw.jsonl")).monitor_path == Path("a/raw_monitor.csv")


@pytest.mark.parametrize("options, message", [
    (dict(monitor_pid=123), "--monitor-pid needs --csv PREFIX or --raw-log PATH"),
    (dict(requests=10, warmup=10), "--warmup 10 must be smaller than --requests 10"),
    (dict(arrival="poisson"), "--arrival and --burstiness shape an open loop: give --rate R too"),
    (dict(rate=5.0, arrival="poisson", burstiness=0.5), "--burstiness applies to --arrival gamma"),
    (dict(stages=((1.0, 1),), ramp=((1.0, 2),)), "--stages and --ramp are two load shapes"),
    (dict(time_scale=0.5), "--time-scale shapes a trace replay: give --trace FILE too"),
    (dict(trace_start=3.0), "--trace-start shapes a trace replay"),
    (dict(trace="t.jsonl", rate=2.0), "--trace gives each request's time and lengths: leave --rate out"),
    (dict(trace="t.jsonl", max_tokens=8), "leave --max-tokens out"),
    (dict(trace="t.jsonl", stages=((1.0, 1),)), "leave --stages out"),
    (dict(metrics_url="http://x/metrics"), "--metrics-url needs --monitor-pid"),
    (dict(cancel_rate=0.3), "--cancel-rate needs --cancel-after WHEN"),
    (dict(cancel_after="2s"), "--cancel-after applies to the requests --cancel-rate P picks"),
    (dict(cancel_rate=0.3, cancel_after="ttft+1s", mode="sync"), "--cancel-after ttft\\+1s counts from the stream"),
])
def test_contradictions_are_one_line(options, message):
    with pytest.raises(SettingsError, match=message):
        LoadSettings.from_options(SimpleNamespace(**options)).check()


def test_a_trace_is_an_open_loop_with_its_own_law_and_exact_output_lengths():
    s = LoadSettings.from_options(SimpleNamespace(trace="t.jsonl"))
    assert s.open_loop and s.arrival_law == "trace" and s.params.ignore_eos and s.params.max_tokens is None


def test_open_loop_law_follows_burstiness():
    assert LoadSettings.from_options(SimpleNamespace(rate=2.0)).arrival_law == "poisson"
    assert LoadSettings.from_options(SimpleNamespace(rate=2.0, burstiness=0.5)).arrival_law == "gamma"
    assert LoadSettings.from_options(SimpleNamespace(rate=2.0, arrival="constant")).arrival_law == "constant"


def test_shapes_and_slos_parse_or_say_what_is_accepted():
    assert stages_type("30s:4,2m:16") == ((30.0, 4), (120.0, 16))
    assert [users for _, users in ramp_type("1:4:20s")] == [1, 2, 3, 4] and sum(s for s, _ in ramp_type("1:4:20s")) == 20
    assert [users for _, users in ramp_type("1:32:120s")][::23] == [1, 32] and len(ramp_type("1:32:120s")) == 24
    assert ramp_type("4:4:3s") == ((3.0, 4),)
    assert slo_type("ttft=500,e2e=2s").e2e == 2.0
    for parse, text, message in ((stages_type, "30s", "is not DURATION:USERS"), (stages_type, "x:4", "duration"),
                                 (ramp_type, "1:4", "is not FROM:TO:DURATION"),
                                 (slo_type, "latency=5", "KEY=MS with KEY one of ttft, tpot, e2e, itl"),
                                 (slo_type, "ttft=-5", "positive number of milliseconds")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(text)


def test_values_typed_into_the_web_ui_are_converted_or_refused():
    s = LoadSettings.from_options(SimpleNamespace(slo="ttft=300", rate="2.5", requests="10"))
    assert s.slo.ttft == 0.3 and s.rate == 2.5 and s.requests == 10
    with pytest.raises(SettingsError, match="--rate: '-1' is not a number > 0"):
        LoadSettings.from_options(SimpleNamespace(rate="-1"))
    for echoed in ("0", "0.0", " "):  # the form sends every default back: --rate 0 there is the closed loop
        assert not LoadSettings.from_options(SimpleNamespace(rate=echoed)).open_loop


def test_cancel_policy_follows_the_options():
    assert LoadSettings.from_options(None).cancel_policy() is None
    s = LoadSettings.from_options(SimpleNamespace(cancel_rate=0.5, cancel_after="1s..2s", seed=4, mode="sync"))
    s.check()  # a time after the send works in sync mode too
    policy = s.cancel_policy()
    assert (policy.rate, policy.seed, policy.after.kind, policy.after.low, policy.after.high) == (0.5, 4, "send", 1, 2)
def test_each_option_reads_the_variable_named_after_its_flag():
    """LOCUST_LLM_ + the flag in capitals: what locust.conf and environment users rely on (add_arguments gives
    each option the variable env_name names; Locust is not imported here: it patches the test process)."""
    ours = [f for f in fields(LoadSettings) if "flag" in f.metadata]
    assert ours and all(env_name(f, ENV_PREFIX) == ENV_PREFIX + f.metadata["flag"][2:].replace("-", "_").upper()
                        for f in ours)
