"""A Mooncake-style trace made here (no network): Poisson arrivals, prompts that share prefix blocks in groups.

    python -m benchmarks.mooncake_trace --out results/traces/mooncake-small.jsonl
    python -m benchmarks.mooncake_trace --requests 50 --duration 60 --groups 4 --prefix-blocks 4 --block-size 128

Each line is ``{"timestamp": ms, "input_length": n, "output_length": m, "hash_ids": [...]}`` as in the
Mooncake / Alibaba traces: request times drawn as a Poisson process of ``--requests`` over ``--duration``
seconds (the first at 0), each request in one of ``--groups`` groups (a system prompt or document its group
shares: the group's ``--prefix-blocks`` hash ids), then blocks of its own up to its input length (drawn
uniformly over ``--input-len``), and an output length drawn over ``--output-len``. Replay it with
``--trace FILE --trace-block-size`` the same ``--block-size`` (docs/traces.md).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

from llmload.core.cliargs import OneLineParser, non_negative_int, positive_float, positive_int
from llmload.tasks.traces import BLOCK_TOKENS


def span(text: str) -> tuple[int, int]:
    """``LOW:HIGH`` (or one number) tokens, both at least 1."""
    low, _, high = text.partition(":")
    try:
        pair = (int(low), int(high or low))
    except ValueError:
        pair = (0, 0)
    if min(pair) < 1 or pair[0] > pair[1]:
        raise argparse.ArgumentTypeError(f"{text!r} is not LOW:HIGH with 1 <= LOW <= HIGH")
    return pair


def mooncake_trace(requests: int, duration_s: float, groups: int, prefix_blocks: int, block_size: int,
                   input_len: tuple[int, int], output_len: tuple[int, int], seed: int = 0) -> list[dict]:
    """The trace's lines, in time order (see the module docstring)."""
    draw = random.Random(seed)
    shared = prefix_blocks * block_size
    times, t = [], 0.0
    for _ in range(requests):
        times.append(t)
        t += draw.expovariate(requests / duration_s)
    lines, next_own = [], groups * prefix_blocks
    for t in times:
        group = draw.randrange(groups)
        n_input = shared + draw.randint(*input_len)
        blocks = math.ceil(n_input / block_size)
        own = list(range(next_own, next_own + blocks - prefix_blocks))
        next_own += len(own)
        lines.append({"timestamp": round(t * 1000), "input_length": n_input,
                      "output_length": draw.randint(*output_len),
                      "hash_ids": [group * prefix_blocks + k for k in range(prefix_blocks)] + own})
    return lines


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m benchmarks.mooncake_trace", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("results/traces/mooncake-small.jsonl"), metavar="FILE",
                   help="where to write the trace (default: %(default)s)")
    p.add_argument("--requests", type=positive_int, default=50, metavar="N", help="requests (default: %(default)s)")
    p.add_argument("--duration", type=positive_float, default=60.0, metavar="SECONDS",
                   help="mean span of the arrivals (default: %(default)s)")
    p.add_argument("--groups", type=positive_int, default=4, metavar="G",
                   help="groups sharing a prefix (default: %(default)s)")
    p.add_argument("--prefix-blocks", type=non_negative_int, default=4, metavar="K",
                   help="hash blocks every request of a group starts with (default: %(default)s)")
    p.add_argument("--block-size", type=positive_int, default=128, metavar="TOKENS",
                   help=f"tokens per hash block (default: %(default)s; Mooncake's is {BLOCK_TOKENS})")
    p.add_argument("--input-len", type=span, default=(64, 256), metavar="LOW:HIGH",
                   help="tokens of each prompt after its group's prefix (default: 64:256)")
    p.add_argument("--output-len", type=span, default=(16, 48), metavar="LOW:HIGH",
                   help="output tokens (default: 16:48)")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="N", help="(default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lines = mooncake_trace(args.requests, args.duration, args.groups, args.prefix_blocks, args.block_size,
                           args.input_len, args.output_len, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    print(f"{args.out}: {len(lines)} requests over {lines[-1]['timestamp'] / 1000:.1f} s, {args.groups} groups "
          f"sharing {args.prefix_blocks} blocks of {args.block_size} tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
