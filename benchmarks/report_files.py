"""Does a refactor change what a report says? A scripted run's report files before and after a change, compared.

    python -m benchmarks.report_files --before /tmp/report-before     # a checkout of the code before the change

The run is written by the *before* checkout's own test helpers (so it is an old
folder the new code must read: 2 servers, 2 levels, 3 repeats, seeded), copied
and merged by each code (``reports.merge --no-tokenizer``), in ``before/run`` and
``after/run``. Every file both reports have is compared byte for byte, once the
run's own path is made the same in both (the HTML page and report.json name it);
where one differs, a CSV is compared on
the columns both have and a Markdown file by whether the before's lines are all
in the after's, in order (a section added by a feature is a change, not a loss).
Exit 0 when nothing the before said is changed or lost, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

from llmload.core.cliargs import OneLineParser, print_error
from llmload.core.paths import REPO_ROOT, RESULTS_DIR
from llmload.core.tables import render

#: Written and run by the before checkout (its tests' helpers): the scripted run, in the folder argv[1].
WRITE_RUN = """
import sys
from pathlib import Path
import numpy as np
from report_helpers import ScriptedRun, closed_loop, monitor_rows

rng = np.random.default_rng(7)
run = ScriptedRun(Path(sys.argv[1]))
for server, base in (("basic-batched", 0.30), ("vllm", 0.15)):
    for c in (1, 4):
        for rep in range(3):
            ttfts = rng.gamma(8.0, base * c ** 0.5 / 8.0, size=40)
            results = closed_loop(ttfts, concurrency=c, itl=0.02 + 0.005 * c, tokens=16, t0=1000.0 + 500 * rep)
            monitor = monitor_rows(int(results[0].start_time), 12, running=lambda t, c=c: c, waiting=lambda t: 0,
                                   kv=lambda t, c=c: 5.0 * c + t)
            run.add(server, "qa", "stream", c, results, repeat=rep, monitor=monitor)
"""


def python_in(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """This interpreter, running ``args`` with ``tree``'s code first on the path (its tests' helpers too)."""
    path = [str(tree), str(tree / "tests"), str(tree / "tests" / "reports"), os.environ.get("PYTHONPATH", "")]
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))})


def compare_csv(before: Path, after: Path) -> str:
    with before.open(newline="") as b, after.open(newline="") as a:
        rows_b, rows_a = list(csv.DictReader(b)), list(csv.DictReader(a))
    if len(rows_b) != len(rows_a):
        return f"CHANGED: {len(rows_b)} rows -> {len(rows_a)}"
    columns_b = list(rows_b[0]) if rows_b else []
    columns_a = list(rows_a[0]) if rows_a else []
    lost = [c for c in columns_b if c not in columns_a]
    changed = sorted({c for x, y in zip(rows_b, rows_a) for c in columns_b if c in y and x[c] != y[c]})
    if lost or changed:
        return f"CHANGED: columns lost {lost}, values changed in {changed[:8]}"
    return f"same on its {len(columns_b)} columns; {len(columns_a) - len(columns_b)} columns added"


def compare_markdown(before: Path, after: Path) -> str:
    lines_b, lines_a = before.read_text().splitlines(), after.read_text().splitlines()
    found, at = 0, 0
    for line in lines_b:
        while at < len(lines_a) and lines_a[at] != line:
            at += 1
        if at == len(lines_a):
            return f"CHANGED: {len(lines_b) - found} of its {len(lines_b)} lines not found in order"
        found, at = found + 1, at + 1
    return f"its {len(lines_b)} lines all there, in order; {len(lines_a) - len(lines_b)} lines added"


def same(before: Path, after: Path, paths: tuple[str, str] | None) -> bool:
    """Byte for byte, with the run's path ``paths[0]`` in ``before`` read as ``paths[1]``."""
    if filecmp.cmp(before, after, shallow=False):
        return True
    if paths is None or before.suffix == ".png":
        return False
    return before.read_bytes().replace(paths[0].encode(), paths[1].encode()) == after.read_bytes()


def compare(before: Path, after: Path, paths: tuple[str, str] | None = None) -> tuple[list[list[str]], bool]:
    """Rows ``[file, verdict]`` of two report folders, and whether nothing the before said changed; ``paths``:
    the run folders' paths (before, after), which the files may name."""
    rows, kept = [], True
    for name in sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()}):
        b, a = before / name, after / name
        if not a.exists():
            rows.append([name, "CHANGED: not written any more"])
            kept = False
            continue
        if not b.exists():
            rows.append([name, "new"])
            continue
        if same(b, a, paths):
            rows.append([name, "byte-identical"])
            continue
        verdict = compare_csv(b, a) if name.endswith(".csv") else \
            compare_markdown(b, a) if name.endswith(".md") else "CHANGED"
        kept = kept and not verdict.startswith("CHANGED")
        rows.append([name, verdict])
    return rows, kept


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m benchmarks.report_files",
                      description="A scripted run's report files before and after a change, compared.")
    p.add_argument("--before", type=Path, required=True, metavar="DIR",
                   help="a checkout of the code before the change (git worktree add DIR COMMIT)")
    p.add_argument("--out", type=Path, default=None, help="where the runs go (default: results/report-files-<time>)")
    args = p.parse_args(argv)
    if not (args.before / "reports" / "merge.py").is_file() or \
            not (args.before / "tests" / "reports" / "report_helpers.py").is_file():
        return print_error(f"--before {args.before} is not a checkout of this suite with its tests")
    out = args.out or RESULTS_DIR / f"report-files-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if out.exists():
        return print_error(f"--out {out} exists: give a new folder")
    runs = {"before": out / "before" / "run", "after": out / "after" / "run"}
    made = python_in(args.before, "-c", WRITE_RUN, str(runs["before"]))
    if made.returncode != 0:
        return print_error(f"the before checkout could not write the scripted run: {made.stderr.strip()[-300:]}")
    shutil.copytree(runs["before"], runs["after"])
    for code, tree in (("before", args.before), ("after", REPO_ROOT)):
        merged = python_in(tree, "-m", "reports.merge", str(runs[code]), "--no-tokenizer")
        if merged.returncode != 0:
            return print_error(f"the {code} code's merge failed: {merged.stderr.strip()[-300:]}")
    rows, kept = compare(runs["before"] / "report", runs["after"] / "report",
                         (str(runs["before"]), str(runs["after"])))
    print(render(rows, ["report file", "before -> after"]))
    print(f"\n{'nothing the before said changed' if kept else 'SOME FILES CHANGED'} ({out})")
    return 0 if kept else 1


if __name__ == "__main__":
    sys.exit(main())
