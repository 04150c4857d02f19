"""Measured request results and every metric formula of the suite, defined once.

The load generator records raw timings only (:class:`RequestResult`: when the
request started, when each chunk carrying generated text arrived, when it
ended). Everything derived from them, per request (:func:`request_metrics`) and
per run (:func:`summarize`), is computed here and nowhere else: the Locust
stats, the raw logs and the reports all call these functions.

Definitions (``t0`` = the moment the request is sent):

* **E2E / total latency**: ``t0`` to the full JSON body (sync) or to the last
  chunk carrying generated text (stream; the usage chunk and ``[DONE]`` do not
  extend it).
* **P2FT / TTFT**: ``t0`` to the first chunk carrying non-empty generated text
  (stream only; a role-only first chat chunk does not count).
* **ITL**: gaps between consecutive text-carrying chunks (stream only), so
  ``E2E - P2FT == sum(ITL)``.
* **TPOT**: ``(E2E - P2FT) / (output_tokens - 1)`` (stream only, needs 2+ tokens).
* **Token generation speed**: ``output_tokens / E2E`` for one request.
* **Request / token throughput**: successful requests / output tokens over the
  run's wall time, from the first request's start to the last request's last
  token.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterable, Sequence

MODES = ("sync", "stream")
APIS = ("completion", "chat")


@dataclass
class RequestResult:
    """Raw measurement of one request, as the load generator saw it (nothing derived)."""

    request_id: str
    task: str
    api: str
    mode: str
    start_time: float  # epoch seconds when the request was sent
    end_offset: float  # seconds from start to the full body (sync) or the stream's end
    token_offsets: list[float] = field(default_factory=list)  # seconds from start, per text chunk
    output_tokens: int | None = None
    output_tokens_source: str = "none"  # "usage" (server-reported) | "chunks" (fallback count) | "none"
    prompt_tokens: int | None = None
    success: bool = True
    status_code: int = 0
    error: str = ""
    prompt_id: str = ""
    worker: str = ""
    output_chars: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict) -> "RequestResult":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class RequestMetrics:
    """Metrics of one request, derived from a :class:`RequestResult` by :func:`request_metrics`."""

    e2e: float
    p2ft: float | None
    tpot: float | None
    itl: tuple[float, ...]
    output_tokens: int
    tokens_per_s: float | None


def request_metrics(result: RequestResult) -> RequestMetrics:
    """Derive E2E, P2FT, TPOT, inter-token gaps and generation speed from raw timings."""
    offsets = result.token_offsets
    if result.mode == "stream" and offsets:
        e2e = offsets[-1]
        p2ft: float | None = offsets[0]
        itl = tuple(b - a for a, b in zip(offsets, offsets[1:]))
    else:
        e2e = result.end_offset
        p2ft = None
        itl = ()
    tokens = result.output_tokens or 0
    tpot = (e2e - p2ft) / (tokens - 1) if p2ft is not None and tokens > 1 else None
    speed = tokens / e2e if tokens and e2e > 0 else None
    return RequestMetrics(e2e=e2e, p2ft=p2ft, tpot=tpot, itl=itl, output_tokens=tokens, tokens_per_s=speed)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation, as numpy's default; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float], quantiles: Iterable[float] = (50, 90, 99)) -> dict[str, float | None]:
    """Mean and percentiles of ``values`` as ``{"mean": .., "p50": .., ...}`` (None when empty)."""
    stats: dict[str, float | None] = {"mean": sum(values) / len(values) if values else None}
    for q in quantiles:
        stats[f"p{q:g}"] = percentile(values, q)
    return stats


@dataclass(frozen=True)
class RunSummary:
    """Aggregate metrics of a set of requests (one run, or one cell of the matrix)."""

    requests: int
    failures: int
    duration_s: float
    request_throughput: float
    output_token_throughput: float
    total_output_tokens: int
    e2e: dict
    p2ft: dict
    tpot: dict
    itl: dict
    tokens_per_s: dict

    def flat(self) -> dict[str, float | int | None]:
        """One flat dict (``e2e_p50`` and so on) for tables."""
        row: dict[str, float | int | None] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, dict):
                row.update({f"{f.name}_{k}": v for k, v in value.items()})
            else:
                row[f.name] = value
        return row


def summarize(results: Iterable[RequestResult]) -> RunSummary:
    """Compute every run-level metric from raw request results.

    Latency figures and throughput count successful requests only; the run's wall
    time spans from the first request's start to the last successful token.
    """
    results = list(results)
    ok = [r for r in results if r.success]
    derived = [request_metrics(r) for r in ok]
    if ok:
        first = min(r.start_time for r in ok)
        last = max(r.start_time + m.e2e for r, m in zip(ok, derived))
        duration = max(last - first, 0.0)
    else:
        duration = 0.0
    tokens = sum(m.output_tokens for m in derived)
    return RunSummary(
        requests=len(results),
        failures=len(results) - len(ok),
        duration_s=duration,
        request_throughput=len(ok) / duration if duration > 0 else 0.0,
        output_token_throughput=tokens / duration if duration > 0 else 0.0,
        total_output_tokens=tokens,
        e2e=distribution([m.e2e for m in derived]),
        p2ft=distribution([m.p2ft for m in derived if m.p2ft is not None]),
        tpot=distribution([m.tpot for m in derived if m.tpot is not None]),
        itl=distribution([gap for m in derived for gap in m.itl]),
        tokens_per_s=distribution([m.tokens_per_s for m in derived if m.tokens_per_s is not None]),
    )


def write_results(path: str | os.PathLike, results: Iterable[RequestResult]) -> int:
    """Write raw results as JSONL (one request per line); return the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with tmp.open("w", encoding="utf-8") as out:
        for result in results:
            out.write(result.to_json() + "\n")
            count += 1
    os.replace(tmp, path)
    return count


def read_results(path: str | os.PathLike) -> list[RequestResult]:
    """Read a raw per-request log written by :func:`write_results`."""
    results = []
    with Path(path).open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if line.strip():
                try:
                    results.append(RequestResult.from_dict(json.loads(line)))
                except (json.JSONDecodeError, TypeError) as exc:
                    raise ValueError(f"{path}:{lineno}: not a request result ({exc})") from None
    return results
