"""Token reconciliation: servers' usage against the embedded model's tokenizer, on real runs of the runner."""

from __future__ import annotations

import pytest

from reports.merge import merge_run
from report_helpers import FakeOpenAI, read_csv, run_module, run_runner

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def usage_run(tmp_path_factory, prompt_dir):
    """mock (honest usage), ``liar`` (usage 2 below the generated tokens), ``zero`` (usage 0) and ``silent`` (no
    usage at all), sync and stream."""
    folder = tmp_path_factory.mktemp("usage")
    fakes = {"liar": FakeOpenAI(lambda n: n - 2), "zero": FakeOpenAI(lambda n: 0), "silent": FakeOpenAI(lambda n: None)}
    try:
        run_runner("--servers", ",".join(["mock"] + [f"{name}={fake.url}" for name, fake in fakes.items()]),
                   "--tasks", "qa", "--modes", "sync,stream", "--parallel", "2", "--requests", "8", "--max-tokens", "8",
                   "--data-dir", str(prompt_dir), "--out", str(folder / "run"), "--no-report", "--repeat", "1")
    finally:
        for fake in fakes.values():
            fake.close()
    return folder / "run"


@pytest.mark.model
def test_under_reported_and_zero_usage_are_flagged(usage_run, tmp_path, default_model):
    md = merge_run(usage_run, tmp_path, tokenizer=default_model).read_text()
    servers = {r["server"]: r for r in read_csv(tmp_path / "tokens.csv")}
    assert servers["mock"]["mismatched"] == "0" and servers["mock"]["verdict"] == "ok"
    assert servers["mock"]["compared"] == "16"
    liar = servers["liar"]
    assert float(liar["mismatch_pct"]) == 100.0 and float(liar["mean_difference"]) == -2.0
    assert float(liar["relative_difference_pct"]) == pytest.approx(-25.0)  # 6 reported of 8 generated
    assert liar["verdict"].startswith("FLAG: usage differs from the tokenizer in 100 %")
    zero = servers["zero"]
    assert zero["usage_zero"] == "16" and zero["compared"] == "0"
    assert zero["verdict"] == "FLAG: usage 0 beside generated text in 16 requests"
    silent = servers["silent"]
    assert silent["usage_missing"] == "16" and silent["usage_reported"] == "0"
    assert silent["verdict"] == "FLAG: usage missing in 16 requests"
    assert "- liar: FLAG" in md and "- zero: FLAG" in md and "- silent: FLAG" in md
    requests = read_csv(tmp_path / "tokens_requests.csv")
    assert len(requests) == 64
    assert {(r["output_tokens"], r["tokenizer_tokens"], r["difference"]) for r in requests
            if r["server"] == "liar"} == {("6", "8", "-2")}
    # throughput counts the server's figure and says where it came from
    rows = {(r["server"], r["mode"]): r for r in read_csv(tmp_path / "summary.csv")}
    assert rows[("liar", "stream")]["token_source"] == "usage"
    assert rows[("zero", "stream")]["token_source"] == "chunks"  # usage 0: the text chunks were counted
    assert rows[("zero", "sync")]["token_source"] == "none"


def test_no_tokenizer_still_reports_usage(usage_run, tmp_path):
    proc = run_module("reports.merge", usage_run, "--no-tokenizer", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    servers = {r["server"]: r for r in read_csv(tmp_path / "tokens.csv")}
    assert servers["liar"]["compared"] == "0" and servers["liar"]["verdict"] == "ok"
    assert servers["zero"]["verdict"].startswith("FLAG: usage 0 beside generated text")
    assert "token reconciliation off (--no-tokenizer)" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_a_tokenizer_that_cannot_load_is_one_line(usage_run, tmp_path):
    proc = run_module("reports.merge", usage_run, "--tokenizer", tmp_path / "no-model", "--out", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --tokenizer {tmp_path / 'no-model'}: cannot load a tokenizer")
