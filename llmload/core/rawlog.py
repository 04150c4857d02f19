"""The raw per-request log: JSON Lines of :class:`~llmload.core.metrics.RequestResult`, appended as results arrive.

:class:`RawLogWriter` appends one line per result and flushes at least every
``flush_s`` seconds, never rewriting the file: after a ``kill -9`` every result
written more than ``flush_s`` earlier is on disk, and the file is valid JSONL up
to its last complete line (:func:`iter_results` skips a cut last line).

A distributed run's workers each write such a log of their own (a *shard*)
and hand its new bytes over in chunks (:meth:`RawLogWriter.take`); the master
appends them to the run's log as they are (:meth:`RawLogWriter.write_bytes`),
and reads what a lost worker flushed after its last chunk with :func:`read_tail`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterable, Iterator

from llmload.core.atomicfile import atomic_write
from llmload.core.formats import version_problem
from llmload.core.metrics import RequestResult


class RawLogWriter:
    """Appends results to a JSONL file (created or truncated on open), flushed at least every ``flush_s``.

    ``keep``: also keep the bytes written since the last :meth:`take` (a shard handing its chunks on).
    """

    def __init__(self, path: str | os.PathLike, flush_s: float = 0.5, keep: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.flush_s = flush_s
        self.count = 0  # lines written
        self.size = 0  # bytes written
        self.keep = keep
        self._kept: list[bytes] = []
        self._taken = (0, 0)  # (bytes, lines) handed on by take()
        self._file = self.path.open("wb")
        self._flushed = time.monotonic()
        self._dirty = False

    def write(self, result: RequestResult) -> None:
        self.write_bytes((result.to_json() + "\n").encode("utf-8"), 1)

    def write_bytes(self, data: bytes, lines: int) -> None:
        """Append ``lines`` complete JSONL lines already encoded (a worker's chunk)."""
        if not data:
            return
        self._file.write(data)
        self._dirty = True
        if time.monotonic() - self._flushed >= self.flush_s:
            self.flush()  # OSError (a full disk): these lines count nowhere, not even in take()
        if self.keep:
            self._kept.append(data)
        self.count += lines
        self.size += len(data)

    def take(self) -> tuple[int, bytes, int]:
        """``(offset, data, lines)``: what was written since the last take, and the byte offset it starts at."""
        offset, lines = self._taken
        data = b"".join(self._kept)
        self._kept.clear()
        self._taken = (self.size, self.count)
        return offset, data, self.count - lines

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


def read_tail(path: str | os.PathLike, offset: int) -> tuple[bytes, list[RequestResult]]:
    """The complete lines of ``path`` from byte ``offset`` on, as bytes and as results (a cut last line is left out).

    Raises OSError when the file cannot be read, ValueError for a line that is not a result.
    """
    with Path(path).open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    data = data[: data.rfind(b"\n") + 1]
    results = []
    for lineno, line in enumerate(data.splitlines(), 1):
        where = f"{path}: line {lineno} after byte {offset}"
        try:
            results.append(result_of(json.loads(line), where))
        except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{where}: not a request result ({exc})") from None
    return data, results


def result_of(data: dict, where: str) -> RequestResult:
    """One line's result; ValueError naming ``where`` for a line of a newer format, TypeError for no result."""
    problem = version_problem(data.get("format_version"), where) if isinstance(data, dict) else None
    if problem:
        raise ValueError(problem)
    return RequestResult.from_dict(data)


def write_results(path: str | os.PathLike, results: Iterable[RequestResult]) -> int:
    """Write raw results as JSONL (one request per line), replacing the file; return the count."""
    count = 0
    with atomic_write(path) as out:
        for result in results:
            out.write(result.to_json() + "\n")
            count += 1
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
                result = result_of(json.loads(line), f"{path}:{lineno}")
            except (json.JSONDecodeError, TypeError) as exc:
                if not line.endswith("\n"):
                    return  # cut short by a kill: every complete line before it counts
                raise ValueError(f"{path}:{lineno}: not a request result ({exc})") from None
            yield result


def read_results(path: str | os.PathLike) -> list[RequestResult]:
    """Every result of a raw per-request log (see :func:`iter_results`)."""
    return list(iter_results(path))
