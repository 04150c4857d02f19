"""The report's optional sections, each built from a run where its data exists.

* dispatch-lag warnings (open loop): a cell whose lag p99 passed :data:`~llmload.core.defaults.LAG_WARN_S`;
* capacity at SLO (``capacity.jsonl``): per server and task with its interval, and ratios between servers;
* the order the cells ran in (``run.json``, the cells' ``order`` and ``block``);
* repeats (``--repeat``): the spread of the throughputs over repeats;
* multi-turn conversations: TTFT and E2E by turn index;
* server-side metrics (monitor columns from the server's ``/metrics``): series over time per cell;
* prefix caching: a server with its prefix cache off against one with it on (run.json says which), per task.

Each builder returns typed rows (:class:`reports.rows.Row` where a row has estimates,
:class:`reports.rows.Ratio` for a ratio, else a :class:`reports.records.Record` of its own:
:class:`CapacityRow`, :class:`GoodputStep`, :class:`OrderRow`, :class:`RepeatRow`,
:class:`SeriesRow`); :mod:`reports.merge` renders them and :mod:`reports.plots` draws them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np

from llmload.core.calibration import Calibration
from llmload.core.clienterror import FLAG_SHARE, FLAGGED
from llmload.core.defaults import LAG_WARN_S
from llmload.core.metrics import SLO, ratio
from llmload.core.points import Point
from llmload.core.sequential import UNDECIDED, interval_at
from llmload.core.stats import Interval, has_enough, min_samples
from reports.estimates import Estimates, Requests, cell_intervals
from reports.format import Part, Table, markdown_section, number
from reports.records import Number, Record
from reports.rows import Ratio, Row, ratio_record, ratios_of
from reports.run import RunData

#: Monitor columns from the server's own metrics.
SERVER_SERIES = ("server_running", "server_waiting", "server_kv_cache_pct", "server_prefix_cache_hit_pct")
THROUGHPUTS = ("request_throughput", "output_token_throughput", "goodput")


# --------------------------------------------------------------------------- (a) open loop


def lag_warnings(groups: list[Row]) -> list[str]:
    """One line per cell whose dispatch lag p99 passed :data:`~llmload.core.defaults.LAG_WARN_S`.

    A cell with fewer values than a p99 needs (the table prints ``n=N<368``) is still
    warned of, its sample's p99 named as the figure of that many requests.
    """
    lines = []
    for row in groups:
        lag = row.get("dispatch_lag_p99")
        if row.ok and lag is not None and lag > LAG_WARN_S:
            n = row.get("dispatch_lag_n")
            small = ("" if n is None or has_enough("p99", int(n))
                     else f" (of {n} requests, fewer than the {min_samples('p99')} a p99 needs)")
            lines.append(f"warning: {row.point.label}: dispatch lag p99 {lag * 1000:.1f} ms{small} > "
                         f"{LAG_WARN_S * 1000:g} ms: the load generator fell behind its schedule "
                         "(the *_sched latencies include the lag)")
    return lines


def client_error_warnings(groups: list[Row]) -> list[str]:
    """One line per cell whose client-error bound passes 5 % of its TTFT p50 or ITL mean."""
    lines = []
    for row in groups:
        if not row.ok or not row.get("client_error_flags"):
            continue
        figures = [f"{FLAGGED[name][1]} ({row.get(FLAGGED[name][0]) * 1000:.1f} ms)"
                   for name in row.get("client_error_flags").split(",")]
        lines.append(f"warning: {row.point.label}: the client's timing error may reach "
                     f"{row.get('client_error_ms'):.1f} ms, "
                     f"more than {FLAG_SHARE:.0%} of {' and '.join(figures)}: the load generator's machine was busy "
                     "(add workers, or run it on a machine of its own)")
    return lines


# --------------------------------------------------------------------------- (b) capacity


def slo_text(entry: dict) -> str:
    """``ttft<=1000ms`` of a record's ``slo`` (targets in ms); any other form as written."""
    slo = entry.get("slo")
    if not isinstance(slo, dict):
        return str(slo) if slo else "none"
    try:
        return SLO(**{k: float(v) / 1000.0 for k, v in slo.items() if k in SLO.KEYS and v is not None}).describe()
    except (TypeError, ValueError):
        return str(slo)


#: Confidence of each of two capacities whose ratio gets a 95 % interval (Bonferroni: 2 x 2.5 %).
RATIO_SIDE_CONFIDENCE = 0.975


def capacity_interval(entry: dict, confidence: float | None = None) -> tuple[float | None, float | None, str]:
    """(low, high, what it is) of a search: its interval at ``confidence`` (default: its own), the steps decided
    again at another level; an older record without one gives its bracket (held, failed), with no confidence."""
    if "ci_low" not in entry:
        low, high = (list(entry.get("bracket") or []) + [None, None])[:2]
        return low, high, "bracket"
    own = entry.get("confidence")
    if confidence is None or confidence == own:
        return entry.get("ci_low"), entry.get("ci_high"), f"{(own or 0) * 100:g} %"
    low, high = interval_at(entry, confidence)
    return low, high, f"{confidence * 100:g} %"


def capacity_ratio(top: dict, bottom: dict) -> tuple[Interval, str]:
    """``top / bottom`` capacity with its interval and how it was made.

    Each capacity's interval at :data:`RATIO_SIDE_CONFIDENCE` (its steps decided again at that level), so that
    both hold together with 95 % confidence and ``[top_low / bottom_high, top_high / bottom_low]`` is a 95 %
    interval of the ratio; an older record without intervals gives what the two brackets allow, with no
    confidence. None where an interval is open or starts at 0.
    """
    value = ratio(top.get("capacity_rps"), bottom.get("capacity_rps"))
    t_low, t_high, what_t = capacity_interval(top, RATIO_SIDE_CONFIDENCE)
    b_low, b_high, what_b = capacity_interval(bottom, RATIO_SIDE_CONFIDENCE)
    method = "brackets" if "bracket" in (what_t, what_b) else "capacity intervals, 97.5 % each"
    steps = len(top.get("steps") or []) + len(bottom.get("steps") or [])
    if None in (t_low, t_high, b_low, b_high) or not b_low or not b_high:
        return Interval(value, n=steps), method
    return Interval(value, t_low / b_high, t_high / b_low, n=steps), method


def capacity_text(entry: dict) -> str | None:
    """``20.1 [19.4, 20.7]`` (``open`` for an interval with no high end); None when no rate held."""
    value = entry.get("capacity_rps")
    if value is None:
        return None
    low, high, _ = capacity_interval(entry)
    if low is None:
        return number(value)
    return f"{number(value)} [{number(low)}, {'open' if high is None else number(high)}]"


CAPACITY_COLUMNS = ["server", "task", "mode", "slo", "slo_target", "capacity_rps", "ci_low", "ci_high",
                    "confidence", "held_rps", "not_held_rps", "saturation_rps", "steps", "cells", "undecided"]


@dataclass
class CapacityRow(Record):
    """One capacity search as the report shows it: the capacity with its interval (``interval``: at what
    confidence, or ``bracket``), the rates the bisection ended between, its steps and cells."""

    server: str | None
    task: str | None
    mode: str | None
    slo: str
    slo_target: Number
    capacity_rps: Number
    ci_low: Number
    ci_high: Number
    confidence: Number
    interval: str
    held_rps: Number
    not_held_rps: Number
    saturation_rps: Number
    steps: int
    cells: int
    undecided: int
    capacity_text: str | None


def capacity_rows(run: RunData) -> list[CapacityRow]:
    rows = []
    for e in run.capacity:
        held, not_held = (list(e.get("bracket") or []) + [None, None])[:2]
        low, high, what = capacity_interval(e)
        steps = e.get("steps") or []
        rows.append(CapacityRow(server=e.get("server"), task=e.get("task"), mode=e.get("mode"), slo=slo_text(e),
                                slo_target=e.get("slo_target"), capacity_rps=e.get("capacity_rps"), ci_low=low,
                                ci_high=high, confidence=e.get("confidence"), interval=what, held_rps=held,
                                not_held_rps=not_held, saturation_rps=e.get("saturation_rps"), steps=len(steps),
                                cells=sum(len(s.get("looks") or [None]) for s in steps),
                                undecided=sum(s.get("decision") == UNDECIDED for s in steps),
                                capacity_text=capacity_text(e)))
    return rows


def capacity_ratios(entries: list[dict], baseline: str | None) -> list[Ratio]:
    """Baseline over each other server's capacity, per task and mode, with its interval (:func:`capacity_ratio`)."""
    if baseline is None:
        return []
    tops = {(e.get("task"), e.get("mode")): e for e in entries if e.get("server") == baseline}
    out = []
    for e in entries:
        top = tops.get((e.get("task"), e.get("mode")))
        if e.get("server") == baseline or top is None:
            continue
        iv, method = capacity_ratio(top, e)
        record = {"ratio": f"{baseline} / {e.get('server')}", "baseline": baseline, "server": e.get("server"),
                  "task": e.get("task"), "mode": e.get("mode"), "concurrency": None, "rate": None,
                  "phase": "capacity", "metric": "capacity_rps", "value": iv.value, "ci_low": iv.low,
                  "ci_high": iv.high, "significant": iv.significant, "pairs": None, "method": method,
                  "slo": slo_text(top)}
        out.append(Ratio("capacity_rps", iv.value, iv, method, record, top, e))
    return out


def capacity_sentence(r: Ratio) -> str:
    """``vllm holds 7.5x [6.0, 9.4] the rate of basic-naive within ttft<=1000ms (significant)``."""
    iv, task, mode, slo = r.interval, r.get("task"), r.get("mode"), r.get("slo")
    if iv.value is None:
        return f"{task} {mode}: no ratio of {r.get('ratio')} (a server held no rate tried within {slo})"
    text = f"{task} {mode}: {r.get('baseline')} holds {iv.value:.2g}x"
    if iv.has_interval:
        text += f" [{iv.low:.2g}, {iv.high:.2g}]"
    text += f" the rate of {r.get('server')} within {slo}"
    if iv.significant is not None:
        text += (" (significant)" if iv.significant else
                 " (not significant: the brackets overlap)" if r.method == "brackets" else
                 " (not significant: the interval holds 1)")
    return text


@dataclass
class GoodputStep(Record):
    """One step of a capacity search: the offered rate, the goodput and SLO attainment (%, with its
    Clopper-Pearson bounds) it measured, its decision."""

    server: str | None
    task: str | None
    mode: str | None
    rate: Number
    goodput: Number
    attainment: Number
    decision: str | None
    attainment_low: Number = None
    attainment_high: Number = None


def goodput_steps(run: RunData) -> list[GoodputStep]:
    """Offered rate against goodput and attainment: every capacity step (with its decision)."""
    return [GoodputStep(e.get("server"), e.get("task"), e.get("mode"), step.get("rate"), step.get("goodput"),
                        step.get("attainment"), step.get("decision"), step.get("attainment_low"),
                        step.get("attainment_high"))
            for e in run.capacity for step in e.get("steps") or []]


# --------------------------------------------------------------------------- order


ORDER_COLUMNS = ["order", "block", "started", "server", "task", "mode", "concurrency", "rate", "repeat", "phase",
                 "wall_s", "status", "prefix"]


@dataclass
class OrderRow(Record):
    """One cell in the order the run ran it: its place, block, start (local ISO time) and wall time."""

    order: int
    block: int | None
    started: str | None
    point: Point
    repeat: int
    wall_s: Number
    status: str
    prefix: str

    def record(self) -> dict:
        return {"order": self.order, "block": self.block, "started": self.started, **self.point.record(),
                "repeat": self.repeat, "wall_s": self.wall_s, "status": self.status, "prefix": self.prefix}


def order_rows(run: RunData) -> list[OrderRow]:
    """The cells in the order they ran (``order`` and ``block`` from the run), with their start and wall times."""
    cells = sorted((d.cell for d in run.cells if d.cell.order is not None), key=lambda c: c.order)
    return [OrderRow(c.order, c.block,
                     dt.datetime.fromtimestamp(c.started).isoformat(timespec="seconds") if c.started else None,
                     c.point, c.repeat, round(c.wall_s, 1), c.status, c.prefix) for c in cells]


def order_text(manifest: dict) -> str | None:
    """``interleaved in random blocks (seed 0; ...); 3 blocks, 96 cells, 3 server starts`` from run.json."""
    order = manifest.get("order")
    if not isinstance(order, dict):
        return None
    blocks = {c.get("block") for c in order.get("cells") or [] if c.get("block") is not None}
    parts = [order.get("description") or order.get("kind") or "?"]
    if blocks:
        parts.append(f"{len(blocks)} blocks")
    parts.append(f"{len(order.get('cells') or [])} cells, {order.get('server_starts', 0)} server starts")
    return "; ".join(parts)


# --------------------------------------------------------------------------- (c) repeats


REPEAT_COLUMNS = ["server", "task", "mode", "concurrency", "rate", "phase", "repeats"] + [
    f"{c}_{s}" for c in THROUGHPUTS for s in ("mean", "ci_low", "ci_high", "min", "max")]


@dataclass
class RepeatSpread:
    """One throughput over a point's repeats: the mean with its t interval, min, max and each repeat's figure."""

    mean: Number
    ci_low: Number
    ci_high: Number
    min: Number
    max: Number
    values: list[float]


@dataclass
class RepeatRow(Record):
    """A point with 2+ repeats: the spread of each throughput (:data:`THROUGHPUTS`) over them."""

    point: Point
    repeats: int
    spreads: dict[str, RepeatSpread] = field(default_factory=dict)

    def record(self) -> dict:
        out = {**self.point.record(), "repeats": self.repeats}
        for column, s in self.spreads.items():
            out.update({f"{column}_mean": s.mean, f"{column}_ci_low": s.ci_low, f"{column}_ci_high": s.ci_high,
                        f"{column}_min": s.min, f"{column}_max": s.max, f"{column}_values": s.values})
        return out


def repeat_rows(groups: list[Row]) -> list[RepeatRow]:
    """Per point with 2+ repeats: each throughput's mean over repeats, its t interval, min and max (and
    each repeat's)."""
    rows = []
    for g in groups:
        cells = g.estimates.repeats
        if len(cells) < 2 or g.point.phase == "capacity":  # a capacity step's looks differ in size: no repeats
            continue
        row = RepeatRow(g.point, len(cells))
        for column in THROUGHPUTS:
            values = [c.value(column) for c in cells if c.value(column) is not None]
            if not values:
                continue
            iv = g.interval(column)
            row.spreads[column] = RepeatSpread(g.get(column), iv.low if iv else None, iv.high if iv else None,
                                               min(values), max(values), values)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- (d) turns


TURN_COLUMNS = ["server", "task", "mode", "concurrency", "rate", "turn", "requests", "ttft_p50", "ttft_p50_ci_low",
                "ttft_p50_ci_high", "e2e_p50", "e2e_p50_ci_low", "e2e_p50_ci_high", "covers"]


def turn_rows(run: RunData) -> list[Row]:
    """Per load point (repeats pooled) and turn index: TTFT and E2E p50 with their within-run intervals."""
    rows = []
    for point, cells in run.groups().items():
        ok = [c for c in cells if c.ok]
        measured = [r for c in ok for r in c.measured]
        turns = sorted({r.turn for r in measured if r.turn is not None})
        for turn in turns:
            mine = [r for r in measured if r.turn == turn]
            found = cell_intervals(Requests(mine, 0.0), ("turn", turn) + point.key)
            figures = {c: found[c].value if c in found else None for c in ("ttft_p50", "e2e_p50")}
            covers = [found[c].covers for c in figures if c in found and found[c].has_interval]
            rows.append(Row(point, "ok", None, Estimates(figures, found),
                            {"turn": turn, "requests": len(mine), "covers": covers[-1] if covers else None}))
    return rows


# --------------------------------------------------------------------------- (e) server-side metrics


def client_rate(results, t0: float, width: float) -> tuple[list[float], list[float]]:
    """Output tokens/s seen by the client in buckets of ``width`` s (a stream's tokens when they arrived)."""
    times, weights = [], []
    for r in results:
        if not r.success or r.warmup:
            continue
        if r.mode == "stream" and r.token_offsets:
            per_chunk = (r.output_tokens or len(r.token_offsets)) / len(r.token_offsets)
            times += [r.start_time + o for o in r.token_offsets]
            weights += [per_chunk] * len(r.token_offsets)
        elif r.output_tokens:
            times.append(r.start_time + r.end_offset)
            weights.append(float(r.output_tokens))
    if not times:
        return [], []
    t = np.asarray(times) - t0
    edges = np.arange(0.0, max(t.max(), width) + width, width)
    counts, _ = np.histogram(t, bins=edges, weights=weights)
    return list(edges[:-1] + width / 2), list(counts / width)


@dataclass
class SeriesRow(Record):
    """One cell's server-side series over time (seconds from its start): the monitor's columns of the server's
    own metrics (:data:`SERVER_SERIES`), the client's output tokens/s, and when the client cancelled requests."""

    point: Point
    repeat: int
    t: list[float]
    series: dict[str, list[float | None]]
    client_t: list[float]
    client_tok_s: list[float]
    requests: int
    cancel_t: list[float]

    def record(self) -> dict:
        return {**self.point.record(), "repeat": self.repeat, "t": self.t, "series": self.series,
                "client_t": self.client_t, "client_tok_s": self.client_tok_s, "requests": self.requests,
                "cancel_t": self.cancel_t}


def floats(values) -> list[float]:
    """Plain floats (numpy's and pandas' scalars are saved as numbers)."""
    return [float(v) for v in values]


def server_series(run: RunData) -> list[SeriesRow]:
    """Per ok cell whose monitor holds server-side metrics: those columns over time, and the client's tok/s."""
    out = []
    for data in run.cells:
        frame = data.monitor
        if not data.ok or frame is None or not len(frame):
            continue
        present = [c for c in SERVER_SERIES if c in frame.columns and frame[c].notna().any()]
        if not present:
            continue
        starts = [r.start_time for r in data.measured]
        t0 = min([float(frame["timestamp"].min())] + starts)
        span = max(float(frame["timestamp"].max()) - t0, 1.0)
        width = max(0.5, span / 60.0)
        client_t, client_tok_s = client_rate(data.results, t0, width)
        cell = data.cell
        out.append(SeriesRow(cell.point, cell.repeat, floats(frame["timestamp"].astype(float) - t0),
                             {c: [None if v != v else float(v) for v in frame[c]] for c in present},
                             floats(client_t), floats(client_tok_s), len(data.measured),
                             floats(r.start_time + r.end_offset - t0 for r in data.measured if r.cancelled)))
    return out


CANCEL_HEADERS = ["cell", "cancelled", "server running mean", "max", "users"]
CANCEL_NOTE = ("Requests the client abandoned (--cancel-rate) count apart from the latencies; the server's own running "
               "count (its /metrics, sampled by the monitor) shows whether it stopped them: in a closed loop it stays "
               "at or below the users when it does.")


def cancel_table(series: list[SeriesRow]) -> list[list]:
    """Per cell with cancels: how many, and what the server's running count did (a server that went on generating
    abandoned requests would run more than the client has in flight)."""
    body = []
    for s in series:
        running = [v for v in s.series.get("server_running", []) if v is not None]
        if not s.cancel_t or not running:
            continue
        point = s.point
        body.append([point.label, f"{len(s.cancel_t)} of {s.requests}", f"{sum(running) / len(running):.2f}",
                     f"{max(running):g}", point.load.concurrency if point.load.closed else "-"])
    return body


def cancel_parts(series: list[SeriesRow]) -> list[Part]:
    """The section on cancellation (nothing where no cell with server series cancelled requests)."""
    body = cancel_table(series)
    return [CANCEL_NOTE + " The plots server_*.png mark each cancel.", Table(CANCEL_HEADERS, body)] if body else []


def cancel_lines(series: list[SeriesRow]) -> list[str]:
    """The report's section on cancellation, as Markdown lines."""
    found = cancel_parts(series)
    return markdown_section("Cancellation", found) if found else []


# --------------------------------------------------------------------------- (f) prefix caching


PREFIX_COLUMNS = ["off_server", "on_server", "task", "mode", "concurrency", "rate", "metric", "off", "off_ci_low",
                  "off_ci_high", "on", "on_ci_low", "on_ci_high", "ratio", "ci_low", "ci_high", "covers",
                  "significant", "method"]


def prefix_rows(groups: list[Row], caching: dict[str, bool], calibration: Calibration | None = None
                ) -> list[Ratio]:
    """TTFT p50/p99 of each server with its prefix cache off against each with it on (``caching``: server name
    -> cache on), in the points both ran (same task, mode, level and phase), and off / on with its paired
    interval."""
    ok = [r for r in groups if r.ok and r.point.server in caching]
    rows = []
    for on_server in (name for name, on in caching.items() if on):
        on = {r.point.shared: r for r in ok if r.point.server == on_server}
        for off in (r for r in ok if not caching[r.point.server]):
            cached = on.get(off.point.shared)
            if cached is None:
                continue
            key = ("prefix", off.point.server, on_server) + off.point.key[1:]
            for column, (value, iv, method) in ratios_of(off, cached, ("ttft_p50", "ttft_p99"), key,
                                                          calibration, by_block=True).items():
                a, b = off.interval(column), cached.interval(column)
                record = {"off_server": off.point.server, "on_server": on_server, **off.point.record(),
                          "metric": column, "off": off.get(column), "off_ci_low": a.low if a else None,
                          "off_ci_high": a.high if a else None, "on": cached.get(column),
                          "on_ci_low": b.low if b else None, "on_ci_high": b.high if b else None, "ratio": value,
                          **ratio_record(iv, method)}
                rows.append(Ratio(column, value, iv, method, record, off, cached))
    return rows
