"""Where a test run's CPU goes: sample every process's CPU time from /proc, then sum it by kind of command.

    python scripts/cpu_by_command.py sample OUT.json &     # until SIGTERM or SIGINT; then run the tests
    python scripts/cpu_by_command.py report OUT.json        # CPU seconds and process counts by kind

Each process's last sample counts (every 0.25 s: a process's last quarter second, and processes shorter than
that, are missed). Linux only. Figures: docs/testing.md ("Where the parallel part's CPU goes").
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections import Counter

PERIOD_S = 0.25
#: Kinds of command, first match wins: (pattern on the command line, kind).
KINDS = [
    (r"vllm\.entrypoints", "vLLM API server"),
    (r"multiprocessing\.spawn|multiprocessing-fork", "multiprocessing child (vLLM engine, worker)"),
    (r"vllm\.model_executor|vllm\.benchmarks|vllm bench", "vLLM, other (its model registry, vllm bench serve)"),
    (r"chrom", "Chromium"),
    (r"llmload_warm", "Locust, warm (the tests' fork server and its children)"),
    (r"llmload\.loadgen\.spare|-m locust|bin/locust", "Locust"),
    (r"-m server .*--engine mock", "basic server, mock engine"),
    (r"-m server", "basic server, real model"),
    (r"import sys;exec\(eval", "pytest-xdist worker"),
    (r"-m pytest", "pytest"),
    (r"llmload\.runner|bin/llmload|runner_helpers", "runner"),
    (r"-m (reports|benchmarks|monitors)\.?(\w*)", None),  # named by its module
    (r"datasets/prepare", "datasets/prepare.py"),
    (r"pip", "pip"),
    (r"python", "other Python"),
]


def sample(out: str) -> None:
    """Sample until SIGTERM or SIGINT, then write ``{"pid:start": [cpu_s, command]}`` to ``out``."""
    hz = os.sysconf("SC_CLK_TCK")
    seen: dict[str, list] = {}

    def write(*_):
        with open(out, "w") as f:
            json.dump(seen, f)
        sys.exit(0)

    signal.signal(signal.SIGTERM, write)
    signal.signal(signal.SIGINT, write)
    me = str(os.getpid())
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                fields = stat[stat.rfind(")") + 2:].split()
                key, cpu = f"{pid}:{fields[19]}", (int(fields[11]) + int(fields[12])) / hz
                if key not in seen:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        seen[key] = [cpu, f.read().replace(b"\0", b" ").decode(errors="replace")[:300]]
                seen[key][0] = cpu
            except (OSError, ValueError, IndexError):
                pass  # ended between the listing and the read
        time.sleep(PERIOD_S)


def kind(command: str) -> str:
    if not command.strip():
        return "kernel threads"
    for pattern, name in KINDS:
        match = re.search(pattern, command)
        if match:
            return name or "python -m " + ".".join(g for g in match.groups() if g)
    return "other: " + command.split()[0][:40]


def report(path: str) -> None:
    with open(path) as f:
        seen = json.load(f)
    cpu, count = Counter(), Counter()
    for seconds, command in seen.values():
        name = kind(command)
        cpu[name] += seconds
        count[name] += 1
    for name, seconds in cpu.most_common():
        print(f"{seconds:8.1f} s CPU  {count[name]:5d} processes  {name}")
    print(f"{sum(cpu.values()):8.1f} s CPU  {sum(count.values()):5d} processes  in all")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("sample", "report"):
        print("usage: python scripts/cpu_by_command.py sample|report FILE.json", file=sys.stderr)
        sys.exit(2)
    (sample if sys.argv[1] == "sample" else report)(sys.argv[2])
