"""Trace replay through Locust on the mock engine: each request at its scaled time with its exact lengths; a bad
trace is one line naming the file, line and field, exit code 2."""

from __future__ import annotations

import re

import pytest

from locust_helpers import output, run_locust
from trace_files import assert_replayed, write_trace

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_a_trace_replays_on_its_scaled_timestamps_with_exact_lengths(fast_mock, tmp_path):
    lines = write_trace(tmp_path / "trace.jsonl", 20)
    proc = run_locust("synthetic.py", fast_mock, "-u", "20", "-r", "20", "-t", "60s", "--api", "completion",
                      "--trace", str(tmp_path / "trace.jsonl"), "--time-scale", "0.5", "--csv", str(tmp_path / "run"))
    assert proc.returncode == 0, output(proc)[-3000:]
    assert "20 requests done (the trace's requests)" in output(proc)
    assert_replayed(tmp_path / "run_requests.jsonl", lines, 0.5)


@pytest.mark.parametrize("text, args, message", [
    ('{"timestamp": 5, "input_length": 9, "output_length": 2}\n{"timestamp": 4, "input_length": 9, '
     '"output_length": 2}\n', (), r"trace.jsonl:2: timestamp: earlier than line 1's"),
    ('{"timestamp": 5, "input_length": 9000, "output_length": 2}\n', ("--max-model-len", "2048"),
     r"trace.jsonl:1: input_length \+ output_length: 9000 \+ 2 tokens exceed the model's context of 2048"),
])
@pytest.mark.slow
def test_a_bad_trace_is_one_line_and_exit_code_2(tmp_path, text, args, message):
    (tmp_path / "trace.jsonl").write_text(text)
    proc = run_locust("synthetic.py", "http://127.0.0.1:9", "--trace", str(tmp_path / "trace.jsonl"), *args,
                      timeout=60)
    said = [line for line in output(proc).splitlines() if line.strip() and "/INFO/" not in line]  # Locust's banner
    assert proc.returncode == 2 and len(said) == 1 and said[0].startswith("error: "), output(proc)
    assert re.search(message, said[0]) and "Traceback" not in output(proc), said[0]
