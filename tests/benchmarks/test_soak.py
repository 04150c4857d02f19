"""The soak benchmark end to end on a small run: real mock server, real Locust with its web UI, the raw log."""

from __future__ import annotations

import pytest

from benchmarks.soak import main

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_soak_prints_memory_poll_times_and_the_sketch_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("benchmarks.soak.STEP", 1000)
    code = main(["--requests", "4000", "--users", "8", "--poll-s", "1", "--out", str(tmp_path)])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    assert "4,000 requests in" in printed.out and "| 1,000 " in printed.out  # a line per step (1,000 here)
    errors = [float(line.split("|")[4]) for line in printed.out.splitlines() if line.startswith("| ttft_p")]
    assert errors and max(errors) <= 1.0  # DDSketch's relative-error bound
    assert (tmp_path / "soak_requests.jsonl").read_text().count("\n") == 4000
