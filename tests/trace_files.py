"""Small traces the tests write, and the check that a raw log replayed one exactly (tests of Locust and the runner)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from llmload.core.rawlog import read_results


def write_trace(path: Path, count: int = 20, seed: int = 0) -> list[dict]:
    """A Mooncake-style trace of ``count`` requests, 20-180 ms apart; requests 2k and 2k+1 share their hash blocks."""
    draw, lines, t = random.Random(seed), [], 0
    for i in range(count):
        t += draw.randint(20, 180)
        n_input = draw.randint(40, 400)
        lines.append({"timestamp": t, "input_length": n_input, "output_length": draw.randint(1, 12),
                      "hash_ids": [i // 2 * 10 + k for k in range(-(-n_input // 64))]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return lines


def assert_replayed(raw_log: Path, lines: list[dict], scale: float) -> None:
    """The raw log holds every trace request once: its intended start at its scaled time (within 1 ms of the
    first's), its prompt and output exactly the trace's lengths (the mock counts a prompt's words)."""
    results = sorted(read_results(raw_log), key=lambda r: int(r.prompt_id.split(":")[1]))
    assert [r.prompt_id for r in results] == [f"trace:{k + 1}" for k in range(len(lines))]
    assert all(r.success for r in results), [r.error for r in results if not r.success]
    zero = results[0].intended_start
    for line, result in zip(lines, results):
        due_ms = (line["timestamp"] - lines[0]["timestamp"]) * scale
        assert abs((result.intended_start - zero) * 1000 - due_ms) < 1.0, (line, result.intended_start - zero)
        assert (result.prompt_tokens, result.output_tokens) == (line["input_length"], line["output_length"])
