"""The tune's report: configurations ranked by their capacity at an SLO, which differences are significant, the
Pareto front, the best configuration and its margin; typed (``report.json``), Markdown and HTML.

    python -m reports.tune results/tune-20261206-101500 [--out DIR]

Read from a tune folder (:mod:`llmload.core.runfiles`: ``tune.json`` and one run
folder per configuration and block), each run through its own typed report's
rows (:mod:`reports.rows`) and capacity searches. Per task and mode:

* **Ranking.** A configuration's capacity: with one block, its search's own
  95 % interval (the steps' Clopper-Pearson decisions and the backlog's trend,
  :mod:`llmload.core.sequential`); with two or more blocks whose searches held a
  rate, the mean over blocks with Student's t (run-to-run variation included).
* **Comparisons.** Each adjacent pair of ranks and the best against each other:
  the ratio of capacities, paired by block (Student's t of the log ratio over the
  blocks both ran, :func:`~llmload.core.stats.block_ratio_interval`) where two or
  more blocks pair, else from the two searches' intervals at 97.5 % each
  (:func:`reports.sections.capacity_ratio`); each with its p-value, adjusted over
  the family of comparisons by Holm's method (:func:`~llmload.core.stats.holm`).
* **Pareto front.** Each configuration at its capacity (the cells of its highest
  held rate): output tok/s against per-user tok/s (each request's output tokens
  over its E2E, mean) and against TTFT p90 (E2E p90 without streaming), each with
  its interval; a configuration is on the front unless another is at least as
  good on both axes and better on one. A domination is significant when both
  axes' paired-by-block ratios are (the larger p-value of the two: an
  intersection-union test), after Holm's method over the dominations; with one
  block it is not judged (the intervals cover one run's own variation only).
* **Best.** The first rank, its capacity, and its margin to the next with that
  comparison's interval and significance.

docs/tune.md says how to read it; docs/statistics.md ("Tuning") what each
interval covers.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from llmload.core.cliargs import OneLineParser
from llmload.core.formats import FORMAT_VERSION, version_problem
from llmload.core.metrics import ratio
from llmload.core.runfiles import RunFolderError, read_tune
from llmload.core.stats import Interval, block_ratio_interval, block_ratio_p_value, holm, repeat_interval
from reports.format import Table, figure_text, markdown_section, number, title
from reports.records import NOT_SAVED, Number, Record
from reports.report import built, builtins, load_json, save_json, saved_report
from reports.rows import Row, run_rows
from reports.run import ReportError, load_run, report_command
from reports.sections import capacity_interval, capacity_ratio, slo_text

FORMAT = "llmload-tune-report"
REPORT_JSON = "report.json"
TUNE_MD = "tune.md"
TUNE_HTML = "tune.html"
#: Level of every test: a comparison is significant when its Holm-adjusted p-value is below it.
ALPHA = 0.05
#: The smallest p-value the search intervals' inversion tells apart (:func:`capacity_p_value`).
P_FLOOR = 1e-6
OUTPUT = "output_token_throughput"
PER_USER = "tokens_per_s_mean"
#: What a single search's capacity interval covers.
SEARCH_COVERS = "the search's decisions (one run)"
SEARCH_METHOD = "capacity search: Clopper-Pearson attainment bounds and the backlog's trend, union bound"
PAIRED = "paired by block: Student's t of the log ratio"
INTERVALS = "the two searches' intervals, 97.5 % each"
NOT_JUDGED = "one block: its intervals cover one run's own variation only (--repeat 2 or more to judge)"
AXES = {"per_user": (PER_USER, "per-user tok/s", True), "latency": (None, "TTFT p90", False)}


def latency_column(mode: str) -> str:
    """TTFT p90 when streaming; E2E p90 for sync requests (no first token)."""
    return "ttft_p90" if mode == "stream" else "e2e_p90"


# --------------------------------------------------------------------------- the records


@dataclass
class ConfigRow(Record):
    """One configuration: its name, server and kind, its flags, what became of its runs, its error share."""

    name: str
    server: str
    kind: str
    args: str
    state: str  # done, failed, partial (some runs not finished), pending
    runs: int
    done: int
    error: str = ""
    requests: int = 0
    failures: int = 0
    excluded: str = ""  # why it is not ranked ("" : ranked where it held a rate)

    @property
    def error_share(self) -> float | None:
        return self.failures / self.requests if self.requests else None


@dataclass
class SearchRow(Record):
    """One capacity search: a configuration in one block, its capacity with its 95 % interval, its bracket."""

    config: str
    block: int
    task: str | None
    mode: str | None
    capacity_rps: Number
    ci_low: Number
    ci_high: Number
    held_rps: Number
    not_held_rps: Number
    saturation_rps: Number
    steps: int
    cells: int
    run: str
    entry: dict = field(default_factory=dict, metadata=NOT_SAVED)  # capacity.jsonl's record (to decide again)


@dataclass
class Standing(Record):
    """A configuration's place in the ranking of one task and mode: its capacity with its interval (``method``
    how it was made, ``capacity.covers`` what it covers), over how many blocks; ``note`` where it is not ranked."""

    task: str
    mode: str
    rank: int | None
    config: str
    capacity: Interval
    method: str
    blocks: int
    note: str = ""


@dataclass
class Comparison(Record):
    """``top / bottom`` capacity (top ranked higher) with its interval, p-value and Holm-adjusted p-value."""

    task: str
    mode: str
    top: str
    bottom: str
    adjacent: bool
    versus_best: bool
    ratio: Interval
    method: str
    p_value: float | None
    p_holm: float | None
    significant: bool | None


@dataclass
class CurvePoint(Record):
    """One load point of one configuration's run: output tok/s, per-user tok/s and latency with their intervals;
    for a capacity step its decision, and whether it is the highest rate held (the configuration's capacity)."""

    config: str
    block: int
    task: str
    mode: str
    phase: str
    level: str
    rate: Number
    concurrency: int
    decision: str | None
    at_capacity: bool
    output: Interval
    per_user: Interval
    latency: Interval
    latency_column: str


@dataclass
class ParetoPoint(Record):
    """A configuration at its capacity (its highest held rate, blocks pooled): the Pareto front's axes with their
    intervals (``covers``), and whether it is on each front."""

    task: str
    mode: str
    config: str
    rate: Number
    blocks: int
    output: Interval
    per_user: Interval
    latency: Interval
    latency_column: str
    covers: str
    front_per_user: bool = False
    front_latency: bool = False


@dataclass
class Domination(Record):
    """``winner`` at least as good as ``loser`` on both axes of one front and better on one; its significance."""

    task: str
    mode: str
    axis: str  # per_user or latency: the front's other axis beside output tok/s
    winner: str
    loser: str
    p_value: float | None
    p_holm: float | None
    significant: bool | None
    method: str


@dataclass
class Best(Record):
    """The first rank of a task and mode, its margin to the next (``margin``: the capacity ratio) and whether the
    margin is significant; ``sentence`` says it."""

    task: str
    mode: str
    config: str
    capacity: Interval
    next: str | None
    margin: Interval | None
    significant: bool | None
    p_holm: float | None
    sentence: str


@dataclass
class TuneReport:
    """Everything the tune's report shows, computed once from its folder (:func:`build_tune_report`) or loaded."""

    path: str
    manifest: dict[str, Any]
    slo: str
    blocks: int
    configs: list[ConfigRow]
    searches: list[SearchRow]
    ranking: list[Standing]
    comparisons: list[Comparison]
    curves: list[CurvePoint]
    pareto: list[ParetoPoint]
    dominations: list[Domination]
    best: list[Best]
    warnings: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return Path(self.path).name

    def pairs(self) -> list[tuple[str, str]]:
        """The (task, mode) pairs ranked, in order."""
        return list(dict.fromkeys((s.task, s.mode) for s in self.ranking))

    def to_builtins(self) -> dict:
        return {"format": FORMAT, "format_version": FORMAT_VERSION,
                **{f.name: builtins(getattr(self, f.name)) for f in fields(self)}}

    def save(self, path: str | Path) -> Path:
        return save_json(path, self.to_builtins())

    @classmethod
    def load(cls, path: str | Path) -> "TuneReport":
        """Read a tune's ``report.json``; :class:`ReportError` (one line) for anything else or another version."""
        data = load_json(path)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ReportError(f"{path}: not a tune report (its 'format' is not {FORMAT!r})")
        version = data.get("format_version")
        problem = version_problem(version, str(path)) or (
            None if version == FORMAT_VERSION else f"{path}: tune report format version {version} is not this "
                                                   f"llmload's ({FORMAT_VERSION}): make it again from its folder")
        if problem:
            raise ReportError(problem)
        try:
            return built(cls, data)
        except (TypeError, KeyError, ValueError) as exc:
            raise ReportError(f"{path}: not a valid tune report ({exc})") from None


# --------------------------------------------------------------------------- statistics


def capacity_p_value(top: dict, bottom: dict) -> float | None:
    """The smallest level alpha at which two searches' capacity intervals, each at 1 - alpha / 2 (each search's
    steps decided again at that level), do not overlap: the p-value of the test :func:`capacity_ratio`'s 95 %
    interval makes (it excludes 1 exactly when this is at most 0.05), found by bisection on a log scale between
    :data:`P_FLOOR` and 1. None for a record without intervals (an older run's bracket)."""
    if "ci_low" not in top or "ci_low" not in bottom:
        return None

    def apart(alpha: float) -> bool:
        level = 1.0 - alpha / 2.0
        t_low, t_high, _ = capacity_interval(top, level)
        b_low, b_high, _ = capacity_interval(bottom, level)
        return bool((t_low is not None and b_high is not None and t_low > b_high)
                    or (t_high is not None and b_low is not None and t_high < b_low))

    if not apart(1.0):
        return 1.0
    if apart(P_FLOOR):
        return P_FLOOR
    low, high = math.log(P_FLOOR), 0.0
    for _ in range(30):
        mid = (low + high) / 2.0
        low, high = (low, mid) if apart(math.exp(mid)) else (mid, high)
    return math.exp(high)


def dominates(a: ParetoPoint, b: ParetoPoint, axis: str) -> bool:
    """``a`` at least as good as ``b`` in output tok/s and on ``axis``, and better on one of them."""
    higher = AXES[axis][2]
    ya, yb = getattr(a, axis).value, getattr(b, axis).value
    if None in (a.output.value, b.output.value, ya, yb):
        return False
    y_ok = ya >= yb if higher else ya <= yb
    return a.output.value >= b.output.value and y_ok and (a.output.value > b.output.value or ya != yb)


# --------------------------------------------------------------------------- building it


@dataclass
class _Run:
    config: str
    block: int
    path: Path
    capacity: list[dict]
    groups: list[Row]


def _load(folder: Path, entry: dict) -> _Run:
    run_dir = folder / entry["dir"]
    report = saved_report(run_dir)
    if report is not None:
        return _Run(entry["config"], entry["block"], run_dir, report.run.capacity, report.groups)
    try:
        run = load_run(run_dir)
    except ReportError as exc:
        raise ReportError(f"{entry['dir']}: {exc}") from None
    _, groups = run_rows(run)
    return _Run(entry["config"], entry["block"], run_dir, run.capacity, groups)


def _search_row(run: _Run, e: dict, where: str) -> SearchRow:
    held, not_held = (list(e.get("bracket") or []) + [None, None])[:2]
    steps = e.get("steps") or []
    return SearchRow(run.config, run.block, e.get("task"), e.get("mode"), e.get("capacity_rps"), e.get("ci_low"),
                     e.get("ci_high"), held, not_held, e.get("saturation_rps"), len(steps),
                     sum(len(s.get("looks") or [None]) for s in steps), where, e)


def _interval(row: Row, column: str) -> Interval:
    """A row's figure with its interval; where there are too few values for one (a p90 of 30 requests), the
    figure alone, with its n."""
    iv = row.interval(column)
    if iv is not None and iv.value is not None:
        return iv
    return Interval(row.get(column), n=iv.n if iv is not None else 0, method="too few values for an interval")


def _curve(run: _Run, searches: dict) -> list[CurvePoint]:
    out = []
    for row in run.groups:
        p = row.point
        if not row.ok or row.get(OUTPUT) is None:
            continue
        e = searches.get((run.config, run.block, p.task, p.mode))
        decisions = {s.get("rate"): s.get("decision") for s in (e or {}).get("steps") or []}
        held = ((e or {}).get("bracket") or [None])[0]
        on_step = p.phase == "capacity" and p.load.rate is not None
        decision = next((d for r, d in decisions.items() if on_step and r is not None
                         and math.isclose(r, p.load.rate, rel_tol=1e-9)), None)
        at_capacity = bool(on_step and held and math.isclose(held, p.load.rate, rel_tol=1e-9))
        latency = latency_column(p.mode)
        out.append(CurvePoint(run.config, run.block, p.task, p.mode, p.phase, p.level, p.load.rate,
                              p.load.concurrency, decision, at_capacity, _interval(row, OUTPUT),
                              _interval(row, PER_USER), _interval(row, latency), latency))
    return out


def _config_rows(info: dict, runs: list[_Run], max_error_rate: float | None) -> list[ConfigRow]:
    rows = []
    for c in info.get("configurations") or []:
        mine = [r for r in info.get("runs") or [] if r["config"] == c["name"]]
        states = [r["state"] for r in mine]
        failed = [r for r in mine if r["state"] == "failed"]
        state = ("failed" if failed else "done" if states and all(s == "done" for s in states)
                 else "partial" if "done" in states else "pending")
        requests = failures = 0
        for run in (r for r in runs if r.config == c["name"]):
            for g in run.groups:
                requests += int(g.get("requests") or 0)
                failures += int(g.get("failures") or 0)
        row = ConfigRow(c["name"], c.get("server", ""), c.get("kind", ""), c.get("args", ""), state, len(mine),
                        states.count("done"), failed[0]["error"] if failed else "", requests, failures)
        share = row.error_share
        if max_error_rate is not None and share is not None and share > max_error_rate:
            row.excluded = f"{share:.1%} of its requests failed, above --max-error-rate {max_error_rate:g}"
        rows.append(row)
    return rows


def _standing(task: str, mode: str, config: ConfigRow, mine: list[SearchRow]) -> Standing:
    held = {s.block: s.capacity_rps for s in mine if s.capacity_rps is not None}
    if config.state == "failed" and not mine:
        return Standing(task, mode, None, config.name, Interval(None), "", 0, f"failed: {config.error}")
    if not mine:
        return Standing(task, mode, None, config.name, Interval(None), "", 0, "not measured yet")
    if len(held) >= 2:
        iv = repeat_interval(list(held.values()))
        method = f"Student's t over {len(held)} blocks" + (" (log scale)" if "log" in iv.method else "")
        note = f"no rate held in {len(mine) - len(held)} of {len(mine)} blocks" if len(held) < len(mine) else ""
        return Standing(task, mode, None, config.name, iv, method, len(mine), note)
    if len(mine) == 1:
        s = mine[0]
        iv = Interval(s.capacity_rps, s.ci_low, s.ci_high, s.steps, SEARCH_COVERS, SEARCH_METHOD)
        return Standing(task, mode, None, config.name, iv, SEARCH_METHOD, 1,
                        "" if s.capacity_rps is not None else "no rate tried held")
    value = next(iter(held.values()), None)
    return Standing(task, mode, None, config.name, Interval(value, n=len(held)), "one block held a rate", len(mine),
                    f"a rate held in {len(held)} of {len(mine)} blocks")


def _compare(task: str, mode: str, top: Standing, bottom: Standing, searches: list[SearchRow]) -> Comparison:
    tops = [s for s in searches if s.config == top.config]
    bottoms = [s for s in searches if s.config == bottom.config]
    by_top = {s.block: s.capacity_rps for s in tops if s.capacity_rps}
    by_bottom = {s.block: s.capacity_rps for s in bottoms if s.capacity_rps}
    if len(set(by_top) & set(by_bottom)) >= 2:
        iv, p, method = block_ratio_interval(by_top, by_bottom), block_ratio_p_value(by_top, by_bottom), PAIRED
    elif len(tops) == 1 and len(bottoms) == 1:
        iv, _ = capacity_ratio(tops[0].entry, bottoms[0].entry)
        iv = Interval(iv.value, iv.low, iv.high, iv.n, SEARCH_COVERS, INTERVALS)
        p, method = capacity_p_value(tops[0].entry, bottoms[0].entry), INTERVALS
    else:
        iv, p, method = Interval(ratio(top.capacity.value, bottom.capacity.value)), None, "too few blocks to pair"
    return Comparison(task, mode, top.config, bottom.config, False, False, iv, method, p, None, None)


def _pareto(task: str, mode: str, ranked: list[Standing], searches: list[SearchRow], runs: list[_Run]
            ) -> tuple[list[ParetoPoint], dict[str, dict[int, Row]]]:
    """Each ranked configuration at its capacity (the group of its highest held rate, per block)."""
    points, per_block = [], {}
    latency = latency_column(mode)
    for standing in ranked:
        rows: dict[int, Row] = {}
        for s in searches:
            if s.config != standing.config or not s.held_rps:
                continue
            run = next(r for r in runs if r.config == s.config and r.block == s.block)
            row = next((g for g in run.groups if g.ok and g.point.phase == "capacity" and g.point.task == task
                        and g.point.mode == mode and g.point.load.rate is not None
                        and math.isclose(g.point.load.rate, s.held_rps, rel_tol=1e-9)), None)
            if row is not None and row.get(OUTPUT) is not None:
                rows[s.block] = row
        if not rows:
            continue
        per_block[standing.config] = rows
        if len(rows) >= 2:
            axes = [repeat_interval([r.get(c) for r in rows.values() if r.get(c) is not None])
                    for c in (OUTPUT, PER_USER, latency)]
            covers = f"across {len(rows)} blocks"
        else:
            (row,) = rows.values()
            axes = [_interval(row, c) for c in (OUTPUT, PER_USER, latency)]
            covers = "within-run only"
        rate = sum(r.point.load.rate for r in rows.values()) / len(rows)
        points.append(ParetoPoint(task, mode, standing.config, rate, len(rows), *axes, latency, covers))
    for axis, flag in (("per_user", "front_per_user"), ("latency", "front_latency")):
        for p in points:
            setattr(p, flag, p.output.value is not None and getattr(p, axis).value is not None
                    and not any(dominates(q, p, axis) for q in points if q is not p))
    return points, per_block


def _dominations(task: str, mode: str, points: list[ParetoPoint], per_block: dict[str, dict[int, Row]]
                 ) -> list[Domination]:
    out = []
    latency = latency_column(mode)
    for axis in AXES:
        column = PER_USER if axis == "per_user" else latency
        found = []
        for a in points:
            for b in points:
                if a is b or not dominates(a, b, axis):
                    continue
                ra, rb = per_block[a.config], per_block[b.config]
                common = set(ra) & set(rb)
                if len(common) >= 2:
                    ps = [block_ratio_p_value({k: ra[k].get(c) for k in common}, {k: rb[k].get(c) for k in common})
                          for c in (OUTPUT, column)]
                    p = None if None in ps else max(ps)
                    method = f"{PAIRED} on both axes over {len(common)} blocks (the larger p-value)"
                else:
                    p, method = None, NOT_JUDGED
                found.append(Domination(task, mode, axis, a.config, b.config, p, None, None, method))
        for d, adjusted in zip(found, holm([d.p_value for d in found])):
            d.p_holm = adjusted
            d.significant = None if adjusted is None else adjusted < ALPHA
        out += found
    return out


def margin_text(iv: Interval) -> str:
    """``24 % [12, 37]``: a capacity ratio as the percent the top is above the bottom."""
    if iv.value is None:
        return "an unknown margin"
    text = f"{(iv.value - 1) * 100:.0f} %"
    if iv.has_interval:
        text += f" [{(iv.low - 1) * 100:.0f}, {(iv.high - 1) * 100:.0f}]"
    return text


def capacity_text(iv: Interval) -> str:
    """``3.1 [2.9, 3.3]`` (``open`` for an interval without a high end; ``none held``)."""
    if iv.value is None:
        return "none held"
    if iv.low is None:
        return number(iv.value)
    return f"{number(iv.value)} [{number(iv.low)}, {'open' if iv.high is None else number(iv.high)}]"


def p_text(p: float | None) -> str:
    if p is None:
        return "-"
    return f"<= {P_FLOOR:g}" if p <= P_FLOOR else f"{p:.2g}"


def significance_text(significant: bool | None, p_holm: float | None) -> str:
    if significant is None:
        return "not judged"
    return (f"significant after Holm's correction: p = {p_text(p_holm)}" if significant
            else f"not significant after Holm's correction: p = {p_text(p_holm)}")


def _best(task: str, mode: str, ranked: list[Standing], comparisons: list[Comparison]) -> Best | None:
    if not ranked:
        return None
    first = ranked[0]
    head = f"{task} {mode}: {first.config}: capacity {capacity_text(first.capacity)} req/s"
    if len(ranked) == 1:
        return Best(task, mode, first.config, first.capacity, None, None, None, None,
                    head + ", the only configuration that held a rate")
    c = next(c for c in comparisons if c.top == first.config and c.bottom == ranked[1].config)
    sentence = (f"{head}, {margin_text(c.ratio)} above the next, {ranked[1].config} "
                f"({significance_text(c.significant, c.p_holm)})")
    return Best(task, mode, first.config, first.capacity, ranked[1].config, c.ratio, c.significant, c.p_holm,
                sentence)


def build_tune_report(folder: str | Path) -> TuneReport:
    """Every table of the tune's report from its folder; :class:`ReportError` (one line) when it is not a tune."""
    folder = Path(folder)
    try:
        info = read_tune(folder)
    except RunFolderError as exc:
        raise ReportError(str(exc)) from None
    runs = [_load(folder, entry) for entry in info.get("runs") or [] if entry.get("state") == "done"]
    searches: list[SearchRow] = []
    entries: dict = {}
    for run in runs:
        for e in run.capacity:
            searches.append(_search_row(run, e, str(run.path.relative_to(folder))))
            entries[(run.config, run.block, e.get("task"), e.get("mode"))] = e
    configs = _config_rows(info, runs, info.get("max_error_rate"))
    curves = [p for run in runs for p in _curve(run, entries)]
    ranking: list[Standing] = []
    comparisons: list[Comparison] = []
    pareto: list[ParetoPoint] = []
    dominations: list[Domination] = []
    best: list[Best] = []
    for task, mode in dict.fromkeys((s.task, s.mode) for s in searches):
        here = [s for s in searches if (s.task, s.mode) == (task, mode)]
        standings = []
        for config in configs:
            standing = _standing(task, mode, config, [s for s in here if s.config == config.name])
            if config.excluded:
                standing.note = f"not ranked: {config.excluded}"
            standings.append(standing)
        excluded = {c.name for c in configs if c.excluded}
        ranked = sorted((s for s in standings if s.capacity.value is not None and s.config not in excluded),
                        key=lambda s: (-s.capacity.value, s.config))
        for i, s in enumerate(ranked, 1):
            s.rank = i
        ranking += ranked + [s for s in standings if s.rank is None]
        family: dict[tuple[str, str], Comparison] = {}
        for i in range(1, len(ranked)):
            for top, bottom, adjacent in ((ranked[i - 1], ranked[i], True), (ranked[0], ranked[i], False)):
                c = family.get((top.config, bottom.config)) or _compare(task, mode, top, bottom, here)
                c.adjacent = c.adjacent or adjacent
                c.versus_best = c.versus_best or top is ranked[0]
                family[(top.config, bottom.config)] = c
        found = list(family.values())
        for c, adjusted in zip(found, holm([c.p_value for c in found])):
            c.p_holm = adjusted
            c.significant = None if adjusted is None else adjusted < ALPHA
        comparisons += found
        points, per_block = _pareto(task, mode, ranked, here, runs)
        pareto += points
        dominations += _dominations(task, mode, points, per_block)
        b = _best(task, mode, ranked, found)
        if b is not None:
            best.append(b)
    warnings = [f"{c.name}: {c.error}" for c in configs if c.state == "failed"]
    warnings += [f"{c.name}: {c.done} of {c.runs} runs finished" for c in configs if c.state in ("partial", "pending")]
    warnings += [f"{c.name}: not ranked: {c.excluded}" for c in configs if c.excluded]
    return TuneReport(str(folder.resolve()), info, slo_text(info), int(info.get("blocks") or 1), configs, searches,
                      ranking, comparisons, curves, pareto, dominations, best, warnings)


# --------------------------------------------------------------------------- tables (Markdown and HTML alike)


#: How to read the report: what each interval covers and how the significance is decided.
METHOD = [
    "Capacity: the highest offered rate whose SLO attainment holds at the target with 95 % confidence "
    "(docs/statistics.md, Capacity). With one block, its interval is the search's own: it covers the search's "
    "decisions, not the run-to-run variation of the machine. With two or more blocks, the mean over blocks with "
    "Student's t, which covers both.",
    "Comparisons: each adjacent pair of ranks and the best against each other, as the ratio of capacities: "
    "paired by block (Student's t of each block's log ratio) where two or more blocks pair, else from the two "
    "searches' intervals at 97.5 % each (Bonferroni). Significant: Holm's step-down adjustment (Holm 1979) of "
    "the family's p-values, at 5 %. A margin's interval is that comparison's own 95 % interval.",
    "Pareto front: each configuration at its capacity (its highest held rate). Output tok/s against per-user "
    "tok/s (each request's output tokens over its E2E, mean) and against TTFT p90 (E2E p90 without streaming). "
    "A configuration is dominated only if another is at least as good on both axes and better on one; a "
    "domination is significant when both axes' paired-by-block ratios are (the larger of their p-values), "
    "after Holm's adjustment over the dominations; with one block it is not judged.",
]


def _where(report: TuneReport, task: str, mode: str, rows: list) -> list:
    return [r for r in rows if (r.task, r.mode) == (task, mode)]


def ranking_table(report: TuneReport, task: str, mode: str) -> Table:
    configs = {c.name: c for c in report.configs}
    comparisons = {(c.top, c.bottom): c for c in _where(report, task, mode, report.comparisons)}
    standings = _where(report, task, mode, report.ranking)
    ranked = [s for s in standings if s.rank is not None]
    body = []
    for s in standings:
        nxt = ranked[s.rank] if s.rank is not None and s.rank < len(ranked) else None
        c = comparisons.get((s.config, nxt.config)) if nxt else None
        body.append([s.rank if s.rank is not None else "-", s.config, configs[s.config].args if s.config in configs
                     else "", capacity_text(s.capacity), s.capacity.covers or "-", s.blocks,
                     f"x{number(c.ratio.value)}" + (f" [{number(c.ratio.low)}, {number(c.ratio.high)}]"
                                                    if c.ratio.has_interval else "") if c and c.ratio.value else "-",
                     p_text(c.p_holm) if c else "-",
                     ("yes" if c.significant else "no" if c.significant is False else "not judged") if c else "-",
                     s.note])
    return Table(["rank", "configuration", "flags", "capacity req/s [95 %]", "interval covers", "blocks",
                  "over the next", "p (Holm)", "significant", "note"], body)


def comparisons_table(report: TuneReport, task: str, mode: str) -> Table:
    body = [[f"{c.top} / {c.bottom}", ", ".join(x for x, on in (("adjacent", c.adjacent), ("best", c.versus_best))
                                                  if on),
             capacity_text(c.ratio) if c.ratio.value is not None else "-", c.method, p_text(c.p_value),
             p_text(c.p_holm), "yes" if c.significant else "no" if c.significant is False else "not judged"]
            for c in _where(report, task, mode, report.comparisons)]
    return Table(["capacity ratio", "compared as", "ratio [95 %]", "method", "p", "p (Holm)", "significant"], body)


def pareto_table(report: TuneReport, task: str, mode: str) -> Table:
    body = []
    for p in _where(report, task, mode, report.pareto):
        beaten = {axis: [d.winner + ("*" if d.significant else "") for d in report.dominations
                         if (d.task, d.mode, d.loser, d.axis) == (task, mode, p.config, axis)] for axis in AXES}
        body.append([p.config, number(p.rate) if p.rate else "-", figure_text(OUTPUT, p.output.value, p.output),
                     figure_text(PER_USER, p.per_user.value, p.per_user),
                     figure_text(p.latency_column, p.latency.value, p.latency), p.covers,
                     *(("yes" if getattr(p, f"front_{axis}") else f"no: {', '.join(beaten[axis])}")
                       if getattr(p, axis).value is not None else "-" for axis in AXES)])
    latency = title(latency_column(mode))
    return Table(["configuration", "rate req/s", "output tok/s", "per-user tok/s", latency, "intervals cover",
                  "front (per-user tok/s)", f"front ({latency.removesuffix(' ms')})"], body)


def configs_table(report: TuneReport) -> Table:
    body = [[c.name, c.kind, c.args or "-", c.state, f"{c.done}/{c.runs}",
             "-" if c.error_share is None else f"{c.error_share:.1%}", c.excluded or c.error or ""]
            for c in report.configs]
    return Table(["configuration", "kind", "flags", "state", "runs done", "failed requests", "note"], body)


def searches_table(report: TuneReport) -> Table:
    body = [[s.config, s.block, s.task, s.mode, capacity_text(Interval(s.capacity_rps, s.ci_low, s.ci_high)),
             s.held_rps, s.not_held_rps, None if s.saturation_rps is None else number(s.saturation_rps), s.steps,
             s.cells, s.run] for s in report.searches]
    return Table(["configuration", "block", "task", "mode", "capacity req/s [95 %]", "held", "not held",
                  "saturation req/s", "steps", "cells", "run folder"], body)


def identity(report: TuneReport) -> list[tuple[str, str]]:
    m = report.manifest
    machine = m.get("machine") or {}
    order = (m.get("order") or {}).get("description", "")
    return [("folder", report.path), ("command", f"`{m.get('command', '')}`"), ("started", str(m.get("started"))),
            ("SLO", f"{report.slo} for {m.get('slo_target')} % of requests"), ("order", order),
            ("machine", f"{machine.get('cpu')}, {machine.get('cores')} cores, {machine.get('memory_gib')} GiB"
             + (f", {len(machine['gpus'])} GPU(s)" if machine.get("gpus") else "")),
            ("commit", str(m.get("git_commit")))]


def best_lines(report: TuneReport) -> list[str]:
    """``best: qa stream: basic-batched[mns=16]: capacity ...`` for each task and mode."""
    return [f"best: {b.sentence}" for b in report.best]


def markdown(report: TuneReport) -> str:
    lines = [f"# Tune report: {report.name}", ""] + [f"- {k}: {v}" for k, v in identity(report)] + [""]
    if report.best:
        lines += markdown_section("Best configuration", [b.sentence for b in report.best])
    for task, mode in report.pairs():
        lines += markdown_section(f"Ranking: {task} {mode}", [ranking_table(report, task, mode),
                                                              comparisons_table(report, task, mode)])
        if _where(report, task, mode, report.pareto):
            lines += markdown_section(f"Pareto front: {task} {mode}", [
                "Each configuration at its capacity; `*` after a configuration that dominates another: significant.",
                pareto_table(report, task, mode)])
    lines += markdown_section("Configurations", [configs_table(report)])
    if report.searches:
        lines += markdown_section("Capacity searches", [searches_table(report)])
    if report.warnings:
        lines += ["## Warnings", ""] + [f"- {w}" for w in report.warnings] + [""]
    lines += markdown_section("Method", list(METHOD))
    return "\n".join(lines)


def write_tune_report(report: TuneReport, out_dir: Path) -> Path:
    """``report.json``, ``tune.md`` and ``tune.html`` into ``out_dir``; returns ``tune.md``."""
    from reports.tune_page import write_tune_page  # plotly: only when the page is written

    out_dir.mkdir(parents=True, exist_ok=True)
    report.save(out_dir / REPORT_JSON)
    path = out_dir / TUNE_MD
    path.write_text(markdown(report), encoding="utf-8")
    write_tune_page(report, out_dir / TUNE_HTML)
    return path


def make_tune_report(folder: str | Path, out_dir: str | Path | None = None) -> tuple[Path, TuneReport]:
    """Build and write the report of the tune in ``folder`` (default out: ``folder/report``)."""
    report = build_tune_report(folder)
    return write_tune_report(report, Path(out_dir) if out_dir else Path(folder) / "report"), report


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m reports.tune",
                           description="Make (again) the report of a tune folder made by llmload tune: report.json, "
                                       "tune.md and tune.html.")
    parser.add_argument("tune_dir", type=Path, metavar="TUNE_DIR", help="the tune's folder")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: TUNE_DIR/report)")
    args: argparse.Namespace = parser.parse_args(argv)
    return report_command(lambda: make_tune_report(args.tune_dir, args.out)[0])


if __name__ == "__main__":
    raise SystemExit(main())
