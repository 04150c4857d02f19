"""Typed settings from parsed options: value checks, defaults, and where the files go."""

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmload.loadgen.options import LoadSettings, SettingsError, non_negative_int, positive_float
from llmload.core.paths import dataset_path


def test_number_types_reject_bad_values_with_one_line():
    assert non_negative_int("0") == 0 and positive_float("0.5") == 0.5
    for parse, text, message in ((non_negative_int, "-3", "'-3' is not an integer >= 0"),
                                 (non_negative_int, "x", "'x' is not an integer >= 0"),
                                 (positive_float, "0", "'0' is not a number > 0")):
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(text)


def test_defaults_without_options():
    s = LoadSettings.from_options(None)
    assert (s.params.api, s.params.mode, s.params.max_tokens, s.params.temperature) == ("chat", "stream", None, 0.0)
    assert s.dataset_for("qa") == dataset_path("qa") and s.raw_log_path is None and s.monitor_path is None
    s.check()


def test_files_follow_the_csv_prefix_or_the_raw_log():
    options = SimpleNamespace(csv_prefix="out/run1", raw_log="ignored.jsonl", max_tokens=0, mode="sync",
                              api="completion")
    s = LoadSettings.from_options(options)
    assert s.raw_log_path == Path("out/run1_requests.jsonl") and s.monitor_path == Path("out/run1_monitor.csv")
    assert s.params.mode == "sync" and s.params.path == "/v1/completions" and s.params.max_tokens is None
    s = LoadSettings.from_options(SimpleNamespace(raw_log="logs/cell_requests.jsonl", dataset="p.jsonl"))
    assert s.monitor_path == Path("logs/cell_monitor.csv") and s.dataset_for("chat") == Path("p.jsonl")
    assert LoadSettings.from_options(SimpleNamespace(raw_log="a/raw.jsonl")).monitor_path == Path("a/raw_monitor.csv")


def test_monitor_without_a_place_to_write_is_refused():
    with pytest.raises(SettingsError, match="--monitor-pid needs --csv PREFIX or --raw-log PATH"):
        LoadSettings.from_options(SimpleNamespace(monitor_pid=123)).check()
