"""Token reconciliation: the server's reported output tokens against the model's tokenizer on the generated text.

For every measured, successful request the raw log holds the server's count
(``output_tokens`` with ``output_tokens_source == "usage"``) and the generated
text; where a tokenizer is at hand the text is counted again, all texts of a run
in one batch call (each distinct text once). Per server the report gives how
often and by how much the two disagree, and flags a server whose usage is
missing, or zero beside generated text.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmload.core.metrics import RequestResult
from llmload.core.model_store import DEFAULT_MODEL_NAME, default_model_dir, is_materialised
from llmload.core.wire import USAGE_ZERO
from llmload.tasks.tokens import TokenCounter
from reports.records import Number, Record
from reports.run import ReportError, RunData

#: A server is flagged when more than this share of its requests disagree with the tokenizer (AIPerf's threshold)
#: by more than re-tokenizing a text explains: decoding tokens and encoding the text again does not give the same
#: tokens back (merges differ at a few places), so honest servers show small differences of either sign too; the
#: flag needs the server to count fewer tokens than its text holds, or a difference beyond DRIFT_PCT.
MISMATCH_WARN_PCT = 10.0
DRIFT_PCT = 10.0


@dataclass
class Tokenizer:
    """A loaded tokenizer and where it came from."""

    name: str
    counter: TokenCounter

    def count(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` without special tokens (one batch call over the distinct texts)."""
        distinct = sorted(set(texts))
        if not distinct:
            return []
        counts = dict(zip(distinct, self.counter.text_tokens(distinct)))
        return [counts[t] for t in texts]


def tokenizer_folder(manifest: dict) -> Path | None:
    """The run's model folder when it is local, else the embedded default model when materialised."""
    model = manifest.get("model")
    if model and Path(model).is_dir():
        return Path(model)
    served = manifest.get("served_model_name")
    if served in (None, DEFAULT_MODEL_NAME) and is_materialised():
        return default_model_dir()
    return None


def load_tokenizer(spec: str | Path) -> Tokenizer:
    """The tokenizer of a folder or id (:class:`TokenCounter`); :class:`ReportError` (one line) when it cannot load."""
    try:
        return Tokenizer(str(spec), TokenCounter.open(str(spec)))
    except ValueError as exc:
        raise ReportError(f"--tokenizer {spec}: cannot load a tokenizer ({exc})") from None


def find_tokenizer(manifest: dict, requested: str | None, enabled: bool = True) -> tuple[Tokenizer | None, str]:
    """The tokenizer to reconcile with, and a line saying which (or why none)."""
    if not enabled:
        return None, "token reconciliation off (--no-tokenizer)"
    if requested:
        tok = load_tokenizer(requested)
        return tok, f"tokenizer: {requested}"
    folder = tokenizer_folder(manifest)
    if folder is None:
        return None, "no tokenizer at hand (the run's model is not a local folder): pass --tokenizer"
    try:
        return load_tokenizer(folder), f"tokenizer: {folder}"
    except ReportError as exc:
        return None, f"no tokenizer: {exc}"


REQUEST_COLUMNS = ["server", "task", "mode", "concurrency", "rate", "repeat", "request_id", "prompt_id",
                   "output_tokens", "output_tokens_source", "usage_zero", "tokenizer_tokens", "difference"]
SERVER_COLUMNS = ["server", "requests", "usage_reported", "usage_missing", "usage_zero", "compared", "mismatched",
                  "mismatch_pct", "mean_difference", "mean_abs_difference", "max_abs_difference",
                  "relative_difference_pct", "token_source", "verdict"]


@dataclass
class RequestTokens(Record):
    """One measured, successful request: the server's count, where it came from, the tokenizer's count of its text
    and the difference (``usage``: the server's own count, None where missing or 0 beside text)."""

    server: str
    task: str
    mode: str
    concurrency: int
    rate: float | None
    repeat: int
    request_id: str
    prompt_id: str
    output_tokens: int | None
    output_tokens_source: str
    usage_zero: bool
    has_text: bool
    usage: int | None
    tokenizer_tokens: int | None = None
    difference: int | None = None


@dataclass
class ServerTokens(Record):
    """One server's token reconciliation: how often and by how much its usage and the tokenizer disagree, and its
    verdict (``ok`` or ``FLAG: ...``)."""

    server: str
    requests: int
    usage_reported: int
    usage_missing: int
    usage_zero: int
    compared: int
    mismatched: int
    mismatch_pct: Number
    mean_difference: Number
    mean_abs_difference: Number
    max_abs_difference: Number
    relative_difference_pct: Number
    token_source: str
    verdict: str = ""


def usage_count(r: RequestResult) -> int | None:
    """The server's own count (None where usage was missing or zero beside text)."""
    return r.output_tokens if r.output_tokens_source == "usage" and USAGE_ZERO not in r.flags else None


def reconcile(run: RunData, tokenizer: Tokenizer | None) -> tuple[list[ServerTokens], list[RequestTokens]]:
    """(one row per server, one row per request): server counts, tokenizer counts and how they differ."""
    requests: list[RequestTokens] = []
    texts: list[str] = []
    for data in run.cells:
        cell = data.cell
        for r in data.measured:
            if not r.success:
                continue
            text = r.reasoning_text + r.output_text
            texts.append(text)
            requests.append(RequestTokens(cell.server, cell.task, cell.mode, cell.concurrency, cell.rate, cell.repeat,
                                          r.request_id, r.prompt_id, r.output_tokens, r.output_tokens_source,
                                          USAGE_ZERO in r.flags, bool(text), usage_count(r)))
    if tokenizer is not None:
        for row, n in zip(requests, tokenizer.count(texts)):
            row.tokenizer_tokens = n
            row.difference = None if row.usage is None else row.usage - n
    servers: list[ServerTokens] = []
    for server in run.servers:
        mine = [r for r in requests if r.server == server]
        if not mine:
            continue
        zero = sum(r.usage_zero for r in mine)
        missing = sum(1 for r in mine if r.has_text and r.usage is None and not r.usage_zero)
        compared = [r for r in mine if r.difference is not None]
        diffs = [r.difference for r in compared]
        mismatched = sum(1 for d in diffs if d != 0)
        sources: dict[str, int] = {}
        for r in mine:
            sources[r.output_tokens_source] = sources.get(r.output_tokens_source, 0) + 1
        counted = sum(r.tokenizer_tokens for r in compared)
        row = ServerTokens(server=server, requests=len(mine), usage_reported=sum(r.usage is not None for r in mine),
                           usage_missing=missing, usage_zero=zero, compared=len(compared), mismatched=mismatched,
                           mismatch_pct=100.0 * mismatched / len(compared) if compared else None,
                           mean_difference=sum(diffs) / len(diffs) if diffs else None,
                           mean_abs_difference=sum(abs(d) for d in diffs) / len(diffs) if diffs else None,
                           max_abs_difference=max((abs(d) for d in diffs), default=None),
                           relative_difference_pct=100.0 * sum(diffs) / counted if compared and counted else None,
                           token_source=", ".join(f"{k} {v}" for k, v in sorted(sources.items())))
        row.verdict = verdict(row)
        servers.append(row)
    return servers, requests


def verdict(row: ServerTokens) -> str:
    problems = []
    if row.usage_zero:
        problems.append(f"usage 0 beside generated text in {row.usage_zero} requests")
    if row.usage_missing:
        problems.append(f"usage missing in {row.usage_missing} requests")
    beyond_drift = (row.mean_difference or 0.0) <= -0.5 or abs(row.relative_difference_pct or 0.0) > DRIFT_PCT
    if row.mismatch_pct is not None and row.mismatch_pct > MISMATCH_WARN_PCT and beyond_drift:
        problems.append(f"usage differs from the tokenizer in {row.mismatch_pct:.0f} % of requests "
                        f"(mean {row.mean_difference:+.1f} tokens)")
    return "FLAG: " + "; ".join(problems) if problems else "ok"
