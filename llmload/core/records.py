"""The one prompt record type, shared by the dataset builder, the locustfiles and the reports.

A :class:`PromptRecord` is one sampled request: the prompt in both API styles
(completion ``prompt`` text and chat ``messages``), its output budget and its
input length in tokens of the model's tokenizer. Records are stored as JSON
Lines, one object per line, written atomically so that a failed build never
leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Iterable, Iterator

from llmload.core.atomicfile import atomic_write


def known_fields(cls, data: dict) -> dict:
    """The items of ``data`` that are fields of the dataclass ``cls`` (a newer file's extra keys are ignored)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


class DatasetError(RuntimeError):
    """A prompt set that cannot be found, read, built or used; the message names the cause and the fix (one line)."""


class RecordFormatError(ValueError):
    """A JSONL file that does not hold valid prompt records."""


@dataclass(frozen=True)
class PromptRecord:
    """One prompt of one task, ready to send to either API."""

    id: str
    task: str
    source: str
    prompt: str
    messages: tuple[dict, ...]
    max_tokens: int
    input_tokens: int
    reference: str | None = None
    metadata: dict = field(default_factory=dict, compare=False)
    #: The user turns of a multi-turn conversation, in order (the first is also in ``messages``);
    #: empty for single-turn tasks. A client sends them one after the other, each with the history so far.
    turns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # JSON gives lists; keep the record immutable and hashable-ish.
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        if not isinstance(self.turns, tuple):
            object.__setattr__(self, "turns", tuple(self.turns))

    def to_json(self) -> str:
        """One JSONL line (without the newline)."""
        data = asdict(self)
        data["messages"] = list(data["messages"])
        data["turns"] = list(data["turns"])
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict) -> "PromptRecord":
        """Build a record from a decoded JSON object, with a clear error for missing fields."""
        required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
        missing = sorted(required - data.keys())
        if missing:
            raise RecordFormatError(f"missing field(s) {', '.join(missing)}")
        return cls(**known_fields(cls, data))


def write_records(path: str | os.PathLike, records: Iterable[PromptRecord]) -> int:
    """Write ``records`` to ``path`` as JSONL atomically; return how many were written."""
    count = 0
    with atomic_write(path) as out:
        for record in records:
            out.write(record.to_json() + "\n")
            count += 1
    return count


def iter_records(path: str | os.PathLike) -> Iterator[PromptRecord]:
    """Yield the records of a JSONL file; a bad line raises :class:`RecordFormatError` naming it."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise RecordFormatError("not a JSON object")
                yield PromptRecord.from_dict(data)
            except (json.JSONDecodeError, TypeError, RecordFormatError) as exc:
                raise RecordFormatError(f"{path}:{lineno}: not a prompt record ({exc})") from None


def read_records(path: str | os.PathLike) -> list[PromptRecord]:
    """All records of a JSONL file (see :func:`iter_records`)."""
    return list(iter_records(path))


def load_prompts(path: str | os.PathLike) -> list[PromptRecord]:
    """The records of a prompt file to send, or :class:`DatasetError` with a line that says what to do."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"prompt file {path} not found: build it with `make data` "
                           f"(python datasets/prepare.py) or pass --dataset PATH")
    try:
        records = read_records(path)
    except (RecordFormatError, OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"cannot read prompts: {exc}") from None
    if not records:
        raise DatasetError(f"prompt file {path} holds no records")
    return records
