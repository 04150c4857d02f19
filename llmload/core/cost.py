"""Cost of serving at a price per hour: dollars per 1M output tokens and per 1,000 requests at a throughput.

    usd_per_million_tokens  = price_per_hour / 3600 / output_tokens_per_s * 1e6
    usd_per_thousand_requests = price_per_hour / 3600 / requests_per_s * 1e3

The one place of both formulas (the Locust summary, the report); the price
options' argparse types: ``--price-per-hour USD`` (Locust) and
``--price-per-hour NAME=USD,...`` (the runner, per server name).
"""

from __future__ import annotations

import argparse
import math

from llmload.core.metrics import ratio

SECONDS_PER_HOUR = 3600.0


def usd_per_million_tokens(price_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """Dollars per 1M output tokens at ``tokens_per_s`` (None without a price or a throughput)."""
    return None if price_per_hour is None else ratio(price_per_hour * 1e6, _per_hour(tokens_per_s))


def usd_per_thousand_requests(price_per_hour: float | None, requests_per_s: float | None) -> float | None:
    """Dollars per 1,000 requests at ``requests_per_s`` (None without a price or a throughput)."""
    return None if price_per_hour is None else ratio(price_per_hour * 1e3, _per_hour(requests_per_s))


def _per_hour(per_second: float | None) -> float | None:
    return None if per_second is None else per_second * SECONDS_PER_HOUR


def cost_figures(price_per_hour: float | None, summary) -> dict | None:
    """``{"price_per_hour", "usd_per_million_output_tokens", "usd_per_thousand_requests"}`` at a
    :class:`~llmload.core.metrics.RunSummary`'s throughputs (None: no price)."""
    if not price_per_hour:
        return None
    return {"price_per_hour": price_per_hour,
            "usd_per_million_output_tokens": usd_per_million_tokens(price_per_hour, summary.output_token_throughput),
            "usd_per_thousand_requests": usd_per_thousand_requests(price_per_hour, summary.request_throughput)}


def cost_text(figures: dict | None) -> str:
    """``; at $2.5/h: $0.56 per 1M output tokens, $0.018 per 1,000 requests`` ('' without a price)."""
    if not figures:
        return ""
    def usd(value):
        return "n/a" if value is None else f"${value:.3g}"
    return (f"; at ${figures['price_per_hour']:g}/h: {usd(figures['usd_per_million_output_tokens'])} per 1M output "
            f"tokens, {usd(figures['usd_per_thousand_requests'])} per 1,000 requests")


def price(text: str) -> float:
    """``--price-per-hour 2.5``: dollars per hour, a finite number > 0."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a price in USD per hour (a number > 0, e.g. 2.5)")
    return value


def prices(text: str) -> dict[str, float]:
    """``--price-per-hour vllm=2.5,basic-batched=0.4``: dollars per hour by server name."""
    found: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = (s.strip() for s in item.partition("="))
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME=USD (e.g. vllm=2.5,basic-batched=0.4)")
        if name in found:
            raise argparse.ArgumentTypeError(f"{name} is given twice")
        try:
            found[name] = price(value)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{name}: {exc}") from None
    if not found:
        raise argparse.ArgumentTypeError("no price given: use NAME=USD,... (e.g. vllm=2.5)")
    return found
