"""Writing a file whole: a reader, or a run killed mid-write, sees the old version or the new one, never half."""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO


@contextmanager
def atomic_write(path: str | os.PathLike, *, newline: str | None = None) -> Iterator[TextIO]:
    """A UTF-8 text file to write ``path``'s new content to; ``path`` is replaced by it in one step on success.

    The temporary file (``.<name>.<random>.tmp``, beside ``path``, so the rename stays on one
    file system) is removed on any failure, BaseException included, and ``path`` is left as it
    was. The parent folder is created. ``newline`` is :func:`open`'s (``""`` for the csv module).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    handle = tmp.open("x", encoding="utf-8", newline=newline)  # "x": a new file (never another's), umask's mode
    try:
        with handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through :func:`atomic_write`; return ``path``."""
    with atomic_write(path) as handle:
        handle.write(text)
    return Path(path)
