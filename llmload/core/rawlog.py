"""The raw per-request log: JSON Lines of :class:`~llmload.core.metrics.RequestResult`, appended as results arrive.

:class:`RawLogWriter` appends one line per result and flushes at least every
``flush_s`` seconds, never rewriting the file: after a ``kill -9`` every result
written more than ``flush_s`` earlier is on disk, and the file is valid JSONL up
to its last complete line (:func:`iter_results` skips a cut last line).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable, Iterator

from llmload.core.metrics import RequestResult


class RawLogWriter:
    """Appends results to a JSONL file (created or truncated on open), flushed at least every ``flush_s``."""

    def __init__(self, path: str | os.PathLike, flush_s: float = 0.5):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_s
        self.count = 0
        self._file = self.path.open("w", encoding="utf-8")
        self._flushed = time.monotonic()
        self._dirty = False

    def write(self, result: RequestResult) -> None:
        self._file.write(result.to_json() + "\n")
        self.count += 1
        self._dirty = True
        if time.monotonic() - self._flushed >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        """Hand what was written to the operating system (it survives the process from then on)."""
        if self._dirty and not self._file.closed:
            self._file.flush()
            self._dirty = False
        self._flushed = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed




def write_results(path: str | os.PathLike, results: Iterable[RequestResult]) -> int:
    """Write raw results as JSONL (one request per line), replacing the file; return the count."""
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


def iter_results(path: str | os.PathLike) -> Iterator[RequestResult]:
    """The results of a raw per-request log, one by one.

    A last line without its newline (a run killed while writing it) is skipped;
    any other bad line raises :class:`ValueError` naming the file and line.
    """
    with Path(path).open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                yield RequestResult.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError) as exc:
                if not line.endswith("\n"):
                    return  # cut short by a kill: every complete line before it counts
                raise ValueError(f"{path}:{lineno}: not a request result ({exc})") from None


def read_results(path: str | os.PathLike) -> list[RequestResult]:
    """Every result of a raw per-request log (see :func:`iter_results`)."""
    return list(iter_results(path))
