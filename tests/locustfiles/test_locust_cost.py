"""--price-per-hour in the Locust suite: the summary's dollars per 1M output tokens and per 1,000 requests."""

from __future__ import annotations

import json

import pytest

from locust_helpers import output, run_locust, write_prompts

pytestmark = pytest.mark.integration


def test_the_summary_prices_the_measured_throughput(fast_mock, tmp_path):
    prompts = write_prompts(tmp_path / "chat.jsonl")
    prefix = tmp_path / "priced"
    proc = run_locust("chat.py", fast_mock, "-u", "4", "-r", "4", "--requests", "40", "--max-tokens", "16",
                      "--ignore-eos", "--dataset", str(prompts), "--model", "mock", "--csv", str(prefix),
                      "--price-per-hour", "2.5", timeout=60)
    assert proc.returncode == 0, output(proc)[-3000:]
    data = json.loads((tmp_path / "priced_summary.json").read_text())
    summary, cost = data["summary"], data["cost"]
    assert summary["total_output_tokens"] == 640 and summary["output_token_throughput"] > 0
    assert cost["price_per_hour"] == 2.5
    assert cost["usd_per_million_output_tokens"] == pytest.approx(2.5 / 3600 / summary["output_token_throughput"]
                                                                  * 1e6)
    assert cost["usd_per_thousand_requests"] == pytest.approx(2.5 / 3600 / summary["request_throughput"] * 1e3)
    line = next(line for line in output(proc).splitlines() if "llmload: 40 requests, " in line)
    assert f"at $2.5/h: ${cost['usd_per_million_output_tokens']:.3g} per 1M output tokens" in line, line
