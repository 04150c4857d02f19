"""Tiny prompt sets for the tests that run the runner (shared by the runner and report tests)."""

from __future__ import annotations

from pathlib import Path

from llmload.core.records import PromptRecord, write_records


def make_data(folder: Path, tasks=("qa",), n=8) -> Path:
    """Prompt sets of ``n`` short prompts per task, ids ``<task>-<i>``."""
    for task in tasks:
        write_records(folder / f"{task}.jsonl", [
            PromptRecord(id=f"{task}-{i}", task=task, source="test", prompt=f"Answer briefly: what is {i} + {i}?",
                         messages=[{"role": "user", "content": f"Answer briefly: what is {i} + {i}?"}],
                         max_tokens=16, input_tokens=12) for i in range(n)])
    return folder
