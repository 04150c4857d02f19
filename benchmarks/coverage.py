"""Measured coverage of the report's intervals: does one run's interval cover what the other runs measured?

    python -m benchmarks.coverage                                  # the mock with time-correlated speed, then
                                                                   # basic-batched; 8 repeats each (about 10 min)
    python -m benchmarks.coverage --engines mock --repeat 8 --requests 200
    python -m benchmarks.coverage --run results/A --run results/B  # run folders made with --repeat R (R >= 3)
    python -m benchmarks.coverage --synthetic                      # the method study on synthetic data

For each engine the runner runs one cell (qa, stream, ``--concurrency``
users) ``--repeat`` times (``python -m llmload.runner ... --repeat R``); the
mock's speed changes every ``--mock-speed-period-ms`` by a seeded lognormal
factor (``LLMLOAD_MOCK_SPEED_PERIOD_MS``, which the runner's mock inherits).
For every repeat and figure (output tok/s, TTFT p50, TPOT mean, E2E p50) the
check is whether that run's 95 % interval covers the mean of the other runs'
figures, for three intervals side by side: the old one (the bootstrap of
independent requests, order statistics for percentiles), the new within-run
one (circular blocks of requests in time order), and the new one widened by a
calibration made without the run checked (from the other repeats: cross-
validated). A correct interval covers the others' mean with probability
``2 Phi(1.96 sqrt((R - 1) / R)) - 1`` (the others' mean varies too): 92.0 % at
R = 5, 93.3 % at R = 8; the goal is 90 %. Each row also gives the run-to-run
relative sd of the figure and each interval's median half-width (relative).

``--synthetic`` measures, on series with known autocorrelation (AR(1) latencies,
a closed loop whose speed switches every 0.5 s) and on repeats with a known
between-run variance, the coverage of the true value by each candidate method:
the within-run block schemes (moving, circular, stationary; Politis & White's
length and twice it), batch means, and for repeats Student's t over the
repeats' figures against a two-stage bootstrap (repeats, then blocks). The
choices and figures are in ``docs/statistics.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llmload.core.cliargs import OneLineParser, positive_float, positive_int, print_error
from llmload.core.paths import RESULTS_DIR
from llmload.core.stats import (Interval, Statistic, Z975, block_counts, interval, repeat_interval, widened)
from llmload.core.tables import render
from reports.calibrate import components, spread_of
from reports.estimates import cell_intervals, requests_of
from reports.run import ReportError, RunData, load_run

FIGURES = ("output_token_throughput", "ttft_p50", "tpot_mean", "e2e_p50")
#: Per engine: requests per repeat (the mock's cells are longer than the speed's period many times over).
ENGINE_REQUESTS = {"mock": 200, "basic-batched": 48}
METHODS = ("old", "within-run", "calibrated")


def expected_share(repeats: int) -> float:
    """The share of runs whose correct 95 % interval covers the mean of the other ``repeats - 1`` runs."""
    return math.erf(Z975 * math.sqrt((repeats - 1) / repeats) / math.sqrt(2.0))


# --------------------------------------------------------------------------- run folders


@dataclass
class Coverage:
    """One figure of one cell over its repeats: how often each method's interval covered the others' mean."""

    cell: str
    figure: str
    repeats: int
    spread: float  # relative sd of the figure between repeats
    hits: dict[str, int]
    checked: dict[str, int]
    half_widths: dict[str, float]  # median relative half-width


def loo_calibrated(ivs: list[Interval], i: int) -> Interval:
    """Repeat ``i``'s within-run interval widened by the run-to-run spread of the other repeats (cross-validated)."""
    parts = components([iv for j, iv in enumerate(ivs) if j != i])
    if parts is None:
        return Interval(ivs[i].value, n=ivs[i].n)
    spread = spread_of([parts])
    return widened(ivs[i], spread.sd, spread.df, within=spread.within)


def cell_coverage(cells: list, label: str, figures=FIGURES) -> list[Coverage]:
    """The coverage rows of one cell's repeats (3 or more)."""
    requests = [requests_of([c]) for c in cells]
    keys = [c.cell.key + (c.cell.phase,) for c in cells]
    found = {"old": [cell_intervals(r, k, blocks=False) for r, k in zip(requests, keys)],
             "within-run": [cell_intervals(r, k) for r, k in zip(requests, keys)]}
    rows = []
    for figure in figures:
        ivs = {m: [f.get(figure) for f in found[m]] for m in found}
        if any(iv is None or iv.value is None for iv in ivs["within-run"]):
            continue
        ivs["calibrated"] = [loo_calibrated(ivs["within-run"], i) for i in range(len(cells))]
        values = np.array([iv.value for iv in ivs["within-run"]])
        hits, checked, widths = {}, {}, {}
        for method in METHODS:
            hit = seen = 0
            half = []
            for i, iv in enumerate(ivs[method]):
                if iv is None or not iv.has_interval:
                    continue
                others = float(np.delete(values, i).mean())
                hit += iv.low <= others <= iv.high
                seen += 1
                half.append((iv.high - iv.low) / 2 / abs(iv.value))
            hits[method], checked[method] = hit, seen
            widths[method] = float(np.median(half)) if half else float("nan")
        rows.append(Coverage(label, figure, len(cells), float(values.std(ddof=1) / abs(values.mean())), hits,
                             checked, widths))
    return rows


def run_coverage(run: RunData) -> list[Coverage]:
    rows = []
    for point, cells in run.groups().items():
        ok = [c for c in cells if c.ok and c.summary is not None]
        if len(ok) >= 3:
            rows += cell_coverage(ok, f"{point.server} {point.task} {point.mode} {point.load.label}")
    return rows


def coverage_table(rows: list[Coverage]) -> str:
    body = []
    for r in rows:
        line = [r.cell, r.figure, r.repeats, f"{100 * r.spread:.1f} %"]
        for method in METHODS:
            seen = r.checked[method]
            line.append(f"{r.hits[method]}/{seen} ({100 * r.hits[method] / seen:.0f} %), +-{100 * r.half_widths[method]:.1f} %"
                        if seen else "no interval")
        body.append(line)
    return render(body, ["cell", "figure", "repeats", "run-to-run sd"]
                  + [f"{m}: covered, half-width" for m in METHODS])


def totals(rows: list[Coverage]) -> str:
    parts = []
    for method in METHODS:
        hit, seen = sum(r.hits[method] for r in rows), sum(r.checked[method] for r in rows)
        parts.append(f"{method} {hit}/{seen} ({100 * hit / seen:.0f} %)" if seen else f"{method} -")
    return "all figures: " + ", ".join(parts)


def runner_repeats(engine: str, args, out: Path) -> Path:
    """One cell of ``engine`` repeated ``args.repeat`` times by the runner into ``out``."""
    env = dict(os.environ)
    if engine == "mock":
        env["LLMLOAD_MOCK_SPEED_PERIOD_MS"] = f"{args.mock_speed_period_ms:g}"
        env["LLMLOAD_MOCK_SPEED_SD"] = f"{args.mock_speed_sd:g}"
    requests = args.requests or ENGINE_REQUESTS.get(engine, 48)
    cmd = [sys.executable, "-m", "llmload.runner", "--servers", engine, "--tasks", "qa", "--modes", "stream",
           "--concurrency", str(args.concurrency), "--requests", str(requests), "--repeat", str(args.repeat),
           "--out", str(out), "--no-report"] + (["--max-tokens", str(args.max_tokens)] if args.max_tokens else []) \
        + (["--data-dir", str(args.data_dir)] if args.data_dir else [])
    print("$ " + " ".join(cmd[1:]) + (f"   (mock speed every {args.mock_speed_period_ms:g} ms, sd "
                                      f"{args.mock_speed_sd:g})" if engine == "mock" else ""), flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise ReportError(f"the runner failed on {engine}: " + (proc.stderr.strip().splitlines() or ["?"])[-1])
    return out


# --------------------------------------------------------------------------- synthetic data


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    """Lognormal latencies ``exp(z / 2)`` whose log follows a stationary AR(1) of unit variance."""
    e = rng.normal(size=n) * math.sqrt(1.0 - phi ** 2)
    z = np.empty(n)
    z[0] = rng.normal()
    for t in range(1, n):
        z[t] = phi * z[t - 1] + e[t]
    return np.exp(0.5 * z)


def switching(rng: np.random.Generator, n: int, users: int = 8, period: float = 0.5, sd: float = 0.3
              ) -> np.ndarray:
    """Latencies of a closed loop of ``users`` whose server's speed switches every ``period`` s (lognormal
    factor of log-sd ``sd``), each request 0.3 s times its own lognormal(0, 0.2) cost, in start order."""
    factors = rng.lognormal(0.0, sd, size=n)  # more periods than a run can reach
    free = np.zeros(users)
    out = np.empty(n)
    for i in range(n):
        user = int(np.argmin(free))
        out[i] = 0.3 * rng.lognormal(0.0, 0.2) * factors[int(free[user] / period)]
        free[user] += out[i]
    return out


def batch_means(x: np.ndarray, stat: str, batches: int = 20) -> tuple[float, float]:
    """Student's t over the statistic of ``batches`` consecutive batches (batch means)."""
    k = x.size // batches
    parts = x[:batches * k].reshape(batches, k)
    per = parts.mean(axis=1) if stat == "mean" else np.percentile(parts, float(stat[1:]), axis=1)
    iv = repeat_interval(per)
    return iv.low, iv.high


#: Candidate within-run methods: (label, keyword options of :func:`llmload.core.stats.interval`).
CANDIDATES = (("independent (old)", {"blocks": False}), ("moving, PW", {"method": "moving", "factor": 1}),
              ("circular, PW", {"method": "circular", "factor": 1}),
              ("stationary, PW", {"method": "stationary", "factor": 1}),
              ("circular, 2 PW (chosen)", {}), ("batch means (20)", None))


def within_study(draws: int, resamples: int) -> str:
    """Coverage of the true mean, p50 and p90 by each candidate, per series and size."""
    rng = np.random.default_rng(20261204)
    truth_switching = np.concatenate([switching(rng, 20000) for _ in range(10)])
    series = [(f"AR(1) phi={phi}", (lambda r, n, phi=phi: ar1(r, n, phi)),
               {"mean": math.exp(0.125), "p50": 1.0, "p90": math.exp(0.5 * 1.2815516)}) for phi in (0.0, 0.5, 0.8)]
    series.append(("speed switching every 0.5 s, 8 users", switching,
                   {s: float(np.mean(truth_switching)) if s == "mean" else
                    float(np.percentile(truth_switching, float(s[1:]))) for s in ("mean", "p50", "p90")}))
    body = []
    for name, make, truth in series:
        for n in (48, 200, 1000):
            hits = {(label, s): 0 for label, _ in CANDIDATES for s in truth}
            for draw in range(draws):
                x = make(rng, n)
                for s, true in truth.items():
                    for label, options in CANDIDATES:
                        if options is None:
                            low, high = batch_means(x, s)
                        else:
                            iv = interval(Statistic(s, x), ("study", name, n, draw), resamples, **options)
                            low, high = iv.low, iv.high
                        hits[(label, s)] += low <= true <= high
            for s in truth:
                body.append([name, n, s] + [f"{100 * hits[(label, s)] / draws:.0f} %" for label, _ in CANDIDATES])
            print(f"  ... {name} n={n}", file=sys.stderr, flush=True)
    return render(body, ["series", "n", "figure"] + [label for label, _ in CANDIDATES])


def two_stage(runs: list[np.ndarray], resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """The hierarchical bootstrap of the pooled mean: repeats with replacement, then circular blocks within each."""
    r, n = len(runs), runs[0].size
    stats = [Statistic("mean", x) for x in runs]
    lengths = [s.block_length() for s in stats]
    per_run = np.stack([s.replicates(np.arange(n), block_counts(n, resamples, rng, k))
                        for s, k in zip(stats, lengths)])  # (runs, resamples) means
    picks = rng.integers(0, r, size=(resamples, r))
    means = per_run[picks, np.arange(resamples)[:, None]].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def repeats_study(draws: int, resamples: int) -> str:
    """Coverage of the cell's mean over runs by Student's t over repeats, the two-stage bootstrap, and the
    pooled within-run interval, with a known between-run sd (relative 10 %) and AR(1) within runs."""
    rng = np.random.default_rng(20261205)
    n, tau, phi = 200, 0.10, 0.5
    truth = math.exp(0.125)  # each run's mean is truth * exp(u), u ~ N(0, tau^2) - tau^2 / 2: E = truth
    body = []
    for repeats in (3, 5, 8):
        hits = {"t over repeats (chosen)": 0, "two-stage bootstrap": 0, "pooled within-run": 0}
        for draw in range(draws):
            runs = [ar1(rng, n, phi) * math.exp(rng.normal(0.0, tau) - tau ** 2 / 2) for _ in range(repeats)]
            t = repeat_interval([float(x.mean()) for x in runs])
            boot = two_stage(runs, resamples, rng)
            pooled = interval(Statistic("mean", np.concatenate(runs)), ("pooled", repeats, draw), resamples)
            for label, (low, high) in (("t over repeats (chosen)", (t.low, t.high)), ("two-stage bootstrap", boot),
                                       ("pooled within-run", (pooled.low, pooled.high))):
                hits[label] += low <= truth <= high
        body.append([repeats] + [f"{100 * h / draws:.0f} %" for h in hits.values()])
    return render(body, ["repeats"] + list(hits))


# --------------------------------------------------------------------------- the command


def machine_line() -> str:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {dt.date.today().isoformat()}"


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m benchmarks.coverage",
                      description="Measured coverage of the report's intervals across repeated runs (old method, "
                                  "new within-run, new calibrated), or of the candidate methods on synthetic data.")
    p.add_argument("--engines", default="mock,basic-batched",
                   help="servers to repeat a cell on (default: %(default)s)")
    p.add_argument("--run", type=Path, action="append", default=[], metavar="RUN_DIR",
                   help="check this run folder (made with --repeat R, R >= 3) instead of running the engines")
    p.add_argument("--repeat", type=positive_int, default=8, help="repeats per engine (default: %(default)s)")
    p.add_argument("--requests", type=positive_int, default=None,
                   help="requests per repeat (default: 200 for the mock, 48 for the others)")
    p.add_argument("--concurrency", type=positive_int, default=8, help="users (default: %(default)s)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help="output tokens (default: the runner's)")
    p.add_argument("--mock-speed-period-ms", type=positive_float, default=500.0,
                   help="the mock's speed changes this often (default: %(default)s)")
    p.add_argument("--mock-speed-sd", type=positive_float, default=0.3,
                   help="log-sd of the mock's speed factor (default: %(default)s)")
    p.add_argument("--data-dir", type=Path, default=None, help="the runner's prompt sets (default: its own)")
    p.add_argument("--out", type=Path, default=None, help="folder for the run folders (default: results/coverage-*)")
    p.add_argument("--synthetic", action="store_true", help="the method study on synthetic data instead")
    p.add_argument("--draws", type=positive_int, default=200, help="synthetic draws per case (default: %(default)s)")
    p.add_argument("--resamples", type=positive_int, default=1000,
                   help="bootstrap resamples in the synthetic study (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeat < 3:
        return print_error("--repeat must be at least 3 (each run is checked against the others' mean, and the "
                           "cross-validated calibration needs 2 other runs)")
    print(f"machine: {machine_line()}")
    if args.synthetic:
        print(f"\nWithin-run methods: coverage of the true value ({args.draws} draws per row, nominal 95 %)\n")
        print(within_study(args.draws, args.resamples))
        print("\nAcross repeats (n = 200 per run, AR(1) 0.5, between-run sd 10 %): coverage of the mean over runs\n")
        print(repeats_study(args.draws, args.resamples))
        return 0
    try:
        runs = [load_run(d) for d in args.run]
        if not runs:
            out = args.out or RESULTS_DIR / f"coverage-{dt.datetime.now():%Y%m%d-%H%M%S}"
            runs = [load_run(runner_repeats(engine, args, out / engine))
                    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]]
    except ReportError as exc:
        return print_error(str(exc))
    rows = [row for run in runs for row in run_coverage(run)]
    if not rows:
        return print_error("no cell with 3 or more completed repeats")
    repeats = sorted({r.repeats for r in rows})
    print("\nShare of runs whose 95 % interval covers the mean of the other runs (a correct interval: "
          + ", ".join(f"{100 * expected_share(r):.1f} % at R = {r}" for r in repeats) + "; goal 90 %)\n")
    print(coverage_table(rows))
    print("\n" + totals(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
