"""The client's stream reading alone: output chunks per CPU-second of :class:`~llmload.core.wire.StreamReader`.

    python -m benchmarks.stream_parsing                              # this checkout
    python -m benchmarks.stream_parsing --reference /tmp/llmload-main # before and after, as ratios

No socket and no server: synthetic streams as vLLM sends them (chat and
completion chunks with continuous usage and the final usage chunk carrying
per-request ``metrics``; Responses' named delta events and
``response.completed``), ``--tokens`` output chunks each, are fed to a fresh
reader one event per read (a client that keeps up) and 16 events per read
(one that falls behind), and its outcome taken, until ``--seconds`` of CPU time
have passed. ``--reference DIR`` (another checkout, e.g. ``git worktree add
--detach /tmp/llmload-main main``) loads that tree's ``llmload`` beside this
one in the same process (as ``llmload_reference``) and measures its reader
the same way: per stream, the two trees read in turn (ABBA), ``--seconds`` of
CPU each, ``--rounds`` times; the table gives each tree's chunks per
CPU-second over all rounds, the ratio this / reference, and the 10th to 90th
percentile of the rounds' own ratios (the noise of a shared machine: two
copies of the same tree read 0.99-1.04 of each other with 5 jobs on 2 cores).
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

from llmload.core.cliargs import OneLineParser, positive_float, positive_int, print_error
from llmload.core.tables import render

STYLES = ("chat", "completion", "responses")
PER_READ = (1, 16)
METRICS = {"queue_time_ms": 1.5, "time_to_first_token_ms": 20.25, "generation_time_ms": 812.0,
           "mean_itl_ms": 3.18, "tokens_per_second": 310.2}


def _event(payload: dict, name: str = "") -> bytes:
    head = f"event: {name}\n" if name else ""
    return (head + "data: " + json.dumps(payload, separators=(",", ":")) + "\n\n").encode()


def stream_events(style: str, tokens: int) -> list[bytes]:
    """One stream's SSE events as vLLM writes them, ``tokens`` output chunks of one token each."""
    if style == "responses":
        events = [_event({"type": "response.created", "sequence_number": 0,
                          "response": {"id": "resp_1", "status": "in_progress", "output": []}}, "response.created")]
        events += [_event({"type": "response.output_text.delta", "sequence_number": i + 1, "item_id": "msg_1",
                           "output_index": 0, "content_index": 0, "delta": f" w{i}", "logprobs": []},
                          "response.output_text.delta") for i in range(tokens)]
        usage = {"input_tokens": 12, "output_tokens": tokens, "output_tokens_details": {"reasoning_tokens": 0}}
        done = {"type": "response.completed", "sequence_number": tokens + 1,
                "response": {"id": "resp_1", "status": "completed", "output": [], "usage": usage,
                             "metrics": METRICS}}
        return events + [_event(done, "response.completed")]
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk" if style == "chat" else "text_completion",
            "created": 1700000000, "model": "m"}
    events = []
    if style == "chat":
        events.append(_event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                   "logprobs": None, "finish_reason": None}],
                              "usage": {"prompt_tokens": 12, "total_tokens": 12, "completion_tokens": 0}}))
    for i in range(tokens):
        choice = ({"index": 0, "delta": {"content": f" w{i}"}, "logprobs": None, "finish_reason": None}
                  if style == "chat" else {"index": 0, "text": f" w{i}", "logprobs": None, "finish_reason": None})
        events.append(_event({**head, "choices": [choice], "usage": {
            "prompt_tokens": 12, "total_tokens": 13 + i, "completion_tokens": i + 1}}))
    events.append(_event({**head, "choices": [], "usage": {"prompt_tokens": 12, "total_tokens": 12 + tokens,
                                                          "completion_tokens": tokens}, "metrics": METRICS}))
    return events + [b"data: [DONE]\n\n"]


ALIAS = "llmload_reference"


class ReferenceTree(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports another checkout's ``llmload`` as ``llmload_reference`` (its own imports renamed to match), so that
    both trees' readers run in one process, in turn."""

    def __init__(self, tree: Path):
        self.root = tree / "llmload"

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != ALIAS and not fullname.startswith(ALIAS + "."):
            return None
        base = self.root.joinpath(*fullname.split(".")[1:])
        if (base / "__init__.py").is_file():
            return importlib.util.spec_from_file_location(fullname, base / "__init__.py", loader=self,
                                                          submodule_search_locations=[str(base)])
        if base.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(fullname, base.with_suffix(".py"), loader=self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        source = Path(module.__spec__.origin).read_text(encoding="utf-8")
        source = re.sub(r"\b(from|import) llmload\b", rf"\1 {ALIAS}", source)
        exec(compile(source, module.__spec__.origin, "exec"), module.__dict__)


def reader_factories(package: str) -> dict[str, Callable[[], object]]:
    """Per style, a function making a new reader of ``package`` (``llmload`` or the reference tree's)."""
    wire = importlib.import_module(f"{package}.core.wire")
    try:
        apis = importlib.import_module(f"{package}.core.apis")  # a tree with the API-style registry
    except ImportError:  # a tree from before it: StreamReader took the style's name
        return {style: functools.partial(wire.StreamReader, style) for style in STYLES}
    return {style: functools.partial(wire.StreamReader, apis.api_style(style)) for style in STYLES}


def read_for(make: Callable[[], object], pieces: list[bytes], tokens: int, seconds: float) -> tuple[int, float]:
    """Read the stream ``pieces`` with new readers until ``seconds`` of CPU time: (output chunks, CPU seconds)."""
    chunks = 0
    start = time.process_time()
    while True:
        reader = make()
        for offset, piece in enumerate(pieces):
            if reader.feed(piece, offset * 0.001):
                break
        outcome = reader.outcome()
        if not outcome.success or len(outcome.token_offsets) != tokens:
            raise RuntimeError(f"the synthetic stream was misread: {outcome.error or len(outcome.token_offsets)}")
        chunks += tokens
        spent = time.process_time() - start
        if spent >= seconds:
            return chunks, spent


def measure(trees: dict[str, str], tokens: int, seconds: float, rounds: int) -> list[list[str]]:
    """One row per stream: each tree's chunks per CPU-second over all rounds, and the ratio (with the range of
    the rounds' own ratios). Each round reads with every tree in turn (ABBA), ``seconds`` of CPU each."""
    factories = {name: reader_factories(package) for name, package in trees.items()}
    rows = []
    for style in STYLES:
        events = stream_events(style, tokens)
        for per_read in PER_READ:
            pieces = [b"".join(events[i:i + per_read]) for i in range(0, len(events), per_read)]
            totals = {name: [0, 0.0] for name in trees}
            rates: dict[str, list[float]] = {name: [] for name in trees}
            for round_ in range(rounds):
                for name in (list(trees) if round_ % 2 == 0 else list(reversed(trees))):
                    chunks, spent = read_for(factories[name][style], pieces, tokens, seconds)
                    totals[name][0] += chunks
                    totals[name][1] += spent
                    rates[name].append(chunks / spent)
            rate = {name: chunks / spent for name, (chunks, spent) in totals.items()}
            row = [f"{style}, {per_read} per read", f"{rate['this']:,.0f}"]
            if "reference" in trees:
                each = sorted(a / b for a, b in zip(rates["this"], rates["reference"]))
                low, high = (statistics.quantiles(each, n=10)[::8] if len(each) > 1 else each * 2)
                row += [f"{rate['reference']:,.0f}", f"{rate['this'] / rate['reference']:.3f}",
                        f"{low:.3f}-{high:.3f}"]
            rows.append(row)
    return rows


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m benchmarks.stream_parsing",
                      description="Output chunks per CPU-second of the client's stream reader, per API style "
                                  "(and against another checkout's, as ratios).")
    p.add_argument("--tokens", type=positive_int, default=256, help="output chunks per stream (default: %(default)s)")
    p.add_argument("--seconds", type=positive_float, default=0.05,
                   help="CPU seconds per stream and tree in each round (default: %(default)s)")
    p.add_argument("--rounds", type=positive_int, default=40,
                   help="rounds; in each, every tree reads every stream once (default: %(default)s)")
    p.add_argument("--reference", type=Path, default=None,
                   help="another checkout of the suite whose reader to measure beside this one's")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    trees = {"this": "llmload"}
    if args.reference is not None:
        if not (args.reference / "llmload" / "core" / "wire.py").is_file():
            return print_error(f"--reference {args.reference}: not a checkout of the suite (no llmload/core/wire.py)")
        sys.meta_path.insert(0, ReferenceTree(args.reference.resolve()))
        trees["reference"] = ALIAS
    try:
        rows = measure(trees, args.tokens, args.seconds, args.rounds)
    except RuntimeError as exc:
        return print_error(str(exc))
    headers = ["stream", "chunks per CPU-s (this)"]
    if args.reference is not None:
        headers += ["reference", "this / reference", "rounds' ratios p10-p90"]
    print(f"{args.tokens} output chunks per stream; {args.rounds} rounds of {args.seconds:g} CPU-s per tree and stream")
    print(render(rows, headers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
