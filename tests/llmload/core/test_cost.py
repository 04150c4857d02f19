"""Cost arithmetic and the price options' parsing."""

from __future__ import annotations

import argparse

import pytest

from llmload.core.cost import (cost_figures, cost_text, price, prices, usd_per_million_tokens,
                               usd_per_thousand_requests)
from llmload.core.metrics import RequestResult, summarize

pytestmark = pytest.mark.unit


def test_dollars_per_million_tokens_and_per_thousand_requests():
    # $3.60 an hour is $0.001 a second: at 1000 tok/s, 1M tokens take 1000 s
    assert usd_per_million_tokens(3.6, 1000.0) == pytest.approx(1.0)
    assert usd_per_thousand_requests(3.6, 2.0) == pytest.approx(0.5)  # 1000 requests in 500 s
    assert usd_per_million_tokens(None, 1000.0) is None and usd_per_million_tokens(3.6, 0.0) is None
    assert usd_per_thousand_requests(3.6, None) is None


def test_the_figures_of_a_summary():
    summary = summarize([RequestResult(request_id=f"r{i}", task="qa", api="chat", mode="sync", start_time=100.0 + i,
                                       end_offset=0.5, output_tokens=8) for i in range(20)])
    assert summary.request_throughput == pytest.approx(20 / 19.5)
    figures = cost_figures(2.5, summary)
    assert figures["usd_per_million_output_tokens"] == pytest.approx(
        2.5 / 3600 / summary.output_token_throughput * 1e6)
    assert figures["usd_per_thousand_requests"] == pytest.approx(2.5 / 3600 / summary.request_throughput * 1e3)
    assert cost_figures(None, summary) is None and cost_text(None) == ""
    assert cost_text(figures).startswith("; at $2.5/h: $") and "per 1,000 requests" in cost_text(figures)


def test_prices_by_server_name():
    assert prices("vllm=2.5, basic-batched=0.4") == {"vllm": 2.5, "basic-batched": 0.4}
    assert price("1e-3") == 0.001


@pytest.mark.parametrize("text, message", [
    ("vllm=-1", "vllm: '-1' is not a price in USD per hour"),
    ("vllm=abc", "vllm: 'abc' is not a price in USD per hour"),
    ("vllm=0", "vllm: '0' is not a price"),
    ("vllm=inf", "vllm: 'inf' is not a price"),
    ("2.5", "'2.5' is not NAME=USD"),
    ("=2.5", "'=2.5' is not NAME=USD"),
    ("vllm=1,vllm=2", "vllm is given twice"),
    (",", "no price given"),
])
def test_bad_prices_say_why(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        prices(text)
    assert str(err.value).startswith(message), str(err.value)
