"""Where the time goes: each load point's latency split into its parts, with intervals, shares and counts.

The parts are the metric catalogue's (:func:`llmload.core.metrics.server_parts`,
``split_latency``): a stream's TTFT = client/network (the TTFT residual) +
frontend + queue + prefill, its E2E = TTFT + decode + tail; a sync request's
E2E = client/network (the E2E residual) + frontend + queue + prefill + decode.
Per load point (its repeats pooled) a :class:`SplitRow` holds each part's mean
with its interval (the report's own, from the row's estimates), its share of
TTFT and of E2E (a ratio of means over the requests that have the part, paired
by request: :func:`llmload.core.stats.ratio_interval`), the values below 0 (a
residual or a tail: kept as measured, counted, flagged), the requests the server
timed, those whose ``metrics`` object was malformed (client-only figures), the
client-error bound the run stated of itself beside the residual, and the span
join's counts where spans were received. :func:`growth` names, per server, the
part that grew most from the lowest load level to the highest
(``llmload explain``, :mod:`reports.explain`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmload.core.metrics import STREAM_PARTS, SYNC_PARTS, TTFT_PARTS, ratio
from llmload.core.points import Load, Point
from llmload.core.stats import Interval, Statistic, ratio_interval
from llmload.core.wire import SERVER_TIMING_MALFORMED
from reports.estimates import Requests
from reports.format import Part as Paragraph, Table, markdown_section, number
from reports.records import Number, Record
from reports.rows import Row
from reports.run import RunData

TITLE = "Where the time goes"
#: How the tables name each part (both residuals are the client and the network).
NAMES = {"ttft_residual": "client/network", "e2e_residual": "client/network", "frontend": "frontend",
         "queue": "queue", "prefill": "prefill", "decode": "decode", "tail": "tail"}
#: One colour per part, the same in the PNG, the HTML page and the web UI's bar (llmcharts.js).
COLOURS = {"ttft_residual": "#9e9e9e", "e2e_residual": "#9e9e9e", "frontend": "#0099ff", "queue": "#ff6d6d",
           "prefill": "#ff9f00", "decode": "#00ca5a", "tail": "#9966cc"}
RESIDUALS = ("ttft_residual", "e2e_residual")
SPAN_COUNTS = ("joined", "requests_without_span", "spans_without_request", "duplicate_ids")


def parts_of(mode: str) -> tuple[str, ...]:
    """The parts of a mode's latency, in the order they stack."""
    return STREAM_PARTS if mode == "stream" else SYNC_PARTS


def total_of(mode: str) -> str:
    """The client latency a mode's parts add up to: ``ttft`` (stream) or ``e2e`` (sync)."""
    return "ttft" if mode == "stream" else "e2e"


@dataclass
class PartFigure:
    """One part of a point's latency: its mean (seconds) with its interval, its share of TTFT and of E2E (ratios
    of means over the requests that have the part, paired by request), and how many of its values are below 0."""

    name: str
    mean: Number
    interval: Interval | None = None
    n: int = 0
    share_ttft: Interval | None = None
    share_e2e: Interval | None = None
    negative: int = 0


@dataclass
class SplitRow(Record):
    """A load point's latency split into its parts (:class:`PartFigure`, in the order they stack)."""

    point: Point
    requests: int  # successful measured requests
    timed: int  # of them, with the server's queue and prefill (their residual known)
    malformed: int  # measured requests whose metrics object was malformed: client-only
    total: Number  # the client's mean TTFT (stream) or E2E (sync), seconds, over every successful request
    total_interval: Interval | None = None
    parts: list[PartFigure] = field(default_factory=list)
    client_error_ms: Number = None  # the bound the run stated of its own timing (reports.rows.client_error)
    spans: dict[str, int] | None = None  # the span join's counts over the point's cells (None: no spans file)

    def part(self, name: str) -> PartFigure | None:
        return next((p for p in self.parts if p.name == name), None)

    @property
    def residual(self) -> PartFigure | None:
        return next((p for p in self.parts if p.name in RESIDUALS), None)

    @property
    def frontend_known(self) -> bool:
        found = self.part("frontend")
        return found is not None and found.n > 0

    def record(self) -> dict:
        """The CSV's columns (:data:`SPLIT_COLUMNS`): seconds as ms, shares as %."""
        out = {**self.point.record(), "requests": self.requests, "timed": self.timed, "malformed": self.malformed,
               "total_ms": ms(self.total), "client_error_ms": self.client_error_ms}
        for p in self.parts:
            iv = p.interval
            out.update({f"{p.name}_mean_ms": ms(p.mean), f"{p.name}_ci_low_ms": ms(iv.low) if iv else None,
                        f"{p.name}_ci_high_ms": ms(iv.high) if iv else None, f"{p.name}_n": p.n,
                        f"{p.name}_negative": p.negative})
            for of, share in (("ttft", p.share_ttft), ("e2e", p.share_e2e)):
                if share is not None:
                    out.update({f"{p.name}_share_{of}_pct": pct(share.value), f"{p.name}_share_{of}_ci_low_pct":
                                pct(share.low), f"{p.name}_share_{of}_ci_high_pct": pct(share.high)})
        for name in SPAN_COUNTS:
            out[f"spans_{name}"] = None if self.spans is None else self.spans.get(name)
        return out


ALL_PARTS = tuple(dict.fromkeys(STREAM_PARTS + SYNC_PARTS))
SPLIT_COLUMNS = (["server", "task", "mode", "concurrency", "rate", "phase", "requests", "timed", "malformed",
                  "total_ms", "client_error_ms"]
                 + [f"{p}_{c}" for p in ALL_PARTS for c in ("mean_ms", "ci_low_ms", "ci_high_ms", "n", "negative")]
                 + [f"{p}_share_{of}_{c}" for p in ALL_PARTS for of in ("ttft", "e2e")
                    for c in ("pct", "ci_low_pct", "ci_high_pct")]
                 + [f"spans_{c}" for c in SPAN_COUNTS])


def ms(seconds) -> Number:
    return None if seconds is None else seconds * 1000.0


def pct(share) -> Number:
    return None if share is None else share * 100.0


# --------------------------------------------------------------------------- building


def share(requests: Requests, name: str, of: str, key: tuple) -> Interval | None:
    """``mean(part) / mean(of)`` over the requests that have both, with the paired interval of
    :func:`~llmload.core.stats.ratio_interval` (units: requests, in time order); the value alone below the
    minimum sample."""
    part, total = requests.values[name], requests.values[of]
    if not part[0].size or not total[0].size:
        return None
    iv, _ = ratio_interval(Statistic("mean", *part), Statistic("mean", *total), key=key)
    if iv.value is None:
        common = np.intersect1d(part[1], total[1])
        if common.size:
            value = ratio(float(part[0][np.isin(part[1], common)].mean()),
                          float(total[0][np.isin(total[1], common)].mean()))
            iv = Interval(value, n=iv.n)
    return iv


def split_row(point: Point, row: Row, cells: list) -> SplitRow | None:
    """The split of one load point from its report row (estimates, requests, client-error bound) and its cells
    (malformed timing, spans); None without requests to split."""
    requests = row.estimates.requests
    if requests is None or not requests.metrics:
        return None
    mode = point.mode
    total = total_of(mode)
    figures = []
    for name in parts_of(mode):
        values = requests.values[name][0]
        if not values.size:
            continue
        key = ("share", name) + point.key
        figures.append(PartFigure(
            name, row.get(f"{name}_mean"), row.interval(f"{name}_mean"), int(values.size),
            share(requests, name, "ttft", key + ("ttft",)) if name in TTFT_PARTS else None,
            share(requests, name, "e2e", key + ("e2e",)), int((values < 0).sum())))
    residual = "ttft_residual" if mode == "stream" else "e2e_residual"
    joins = [c.spans.to_dict() for c in cells if c.spans is not None]
    return SplitRow(point, len(requests.metrics), int(requests.values[residual][0].size),
                    sum(SERVER_TIMING_MALFORMED in r.flags for c in cells for r in c.measured),
                    row.get(f"{total}_mean"), row.interval(f"{total}_mean"), figures, row.get("client_error_ms"),
                    {k: sum(j[k] for j in joins) for k in SPAN_COUNTS} if joins else None)


def level_key(point: Point) -> tuple:
    """Closed loops before open ones, each by its level."""
    load = point.load
    return (0, load.concurrency) if load.closed else (1, load.rate)


def split_rows(run: RunData, groups: list[Row]) -> list[SplitRow]:
    """One :class:`SplitRow` per ok load point of the run (its repeats pooled): by server (in the run's order),
    task, mode, phase and load level."""
    cells = run.groups()
    servers = {name: i for i, name in enumerate(run.servers)}
    out = []
    for row in groups:
        if row.ok and row.point in cells:
            found = split_row(row.point, row, [c for c in cells[row.point] if c.ok])
            if found is not None:
                out.append(found)
    return sorted(out, key=lambda r: (servers.get(r.point.server, len(servers)), r.point.task, r.point.mode,
                                      r.point.phase, level_key(r.point)))


# --------------------------------------------------------------------------- growth with load


def level_words(load: Load) -> str:
    """``32 users`` or ``2 req/s``."""
    return f"{load.concurrency} users" if load.closed else f"{load.rate:g} req/s"


def span_words(low: Load, high: Load) -> str:
    """``from 1 to 32 users`` or ``from 1 to 4 req/s``."""
    if low.closed:
        return f"from {low.concurrency} to {high.concurrency} users"
    return f"from {low.rate:g} to {high.rate:g} req/s"


@dataclass
class Growth:
    """How one server's latency parts changed from its lowest load level to its highest (same task, mode, phase,
    kind of loop): each part's mean at both ends, seconds."""

    low: SplitRow
    high: SplitRow

    @property
    def total(self) -> str:
        return total_of(self.high.point.mode)

    @property
    def names(self) -> list[str]:
        """The parts of the total (TTFT's four, or all of a sync E2E's) with a mean at both ends."""
        wanted = TTFT_PARTS if self.total == "ttft" else SYNC_PARTS
        return [p.name for p in self.high.parts if p.name in wanted and p.mean is not None
                and self.low.part(p.name) is not None and self.low.part(p.name).mean is not None]

    def grew(self, name: str) -> float:
        return self.high.part(name).mean - self.low.part(name).mean

    @property
    def total_grew(self) -> float | None:
        if self.high.total is None or self.low.total is None:
            return None
        return self.high.total - self.low.total

    @property
    def fastest(self) -> str | None:
        """The part whose mean grew most (None: no part known at both ends)."""
        return max(self.names, key=self.grew, default=None)

    def sentence(self) -> str:
        """``qa stream: at 32 users vllm's TTFT is 71 % [68, 74] queue (queue grew 120 ms of TTFT's 150 ms growth
        from 1 to 32 users)``."""
        point, total = self.high.point, self.total.upper()
        return f"{point.task} {point.mode}: " + self._claim(point, total)

    def share(self, name: str) -> Interval | None:
        """The part's share of the total at the highest level."""
        figure = self.high.part(name)
        return figure.share_ttft if self.total == "ttft" else figure.share_e2e

    def _claim(self, point: Point, total: str) -> str:
        high_words = level_words(point.load)
        span = span_words(self.low.point.load, point.load)
        fastest, grown = self.fastest, self.total_grew
        if fastest is None or grown is None:
            return f"{point.server}'s {total}: no part of it known at both ends ({span})"
        if grown <= 0:
            largest = max(self.names, key=lambda n: self.high.part(n).mean)
            return (f"{point.server}'s {total} did not grow {span} ({grown * 1000:+.0f} ms); at {high_words} it is "
                    f"{share_text(self.share(largest))} {NAMES[largest]}")
        return (f"at {high_words} {point.server}'s {total} is {share_text(self.share(fastest))} {NAMES[fastest]} "
                f"({NAMES[fastest]} grew {self.grew(fastest) * 1000:.0f} ms of {total}'s {grown * 1000:.0f} ms "
                f"growth {span})")

    def breakdown(self) -> str:
        """``TTFT grew 150 ms from 1 to 32 users: client/network +2 ms (1 %), queue +120 ms (80 %), ...``: each
        part's growth and its share of the total's."""
        grown = self.total_grew
        if grown is None:
            return ""
        parts = ", ".join(f"{NAMES[n]} {self.grew(n) * 1000:+.0f} ms"
                          + (f" ({self.grew(n) / grown * 100:.0f} %)" if grown > 0 else "") for n in self.names)
        return (f"{self.high.point.server} {self.total.upper()} {'grew' if grown > 0 else 'changed'} "
                f"{grown * 1000:+.0f} ms {span_words(self.low.point.load, self.high.point.load)}: {parts}")


def share_text(iv: Interval | None) -> str:
    """``71 % [68, 74]`` of a share (``?`` where none)."""
    if iv is None or iv.value is None:
        return "? %"
    text = f"{iv.value * 100:.0f} %"
    return text + (f" [{iv.low * 100:.0f}, {iv.high * 100:.0f}]" if iv.has_interval else "")


def growth(rows: list[SplitRow]) -> list[Growth]:
    """Per server, task, mode, phase and kind of loop with two load levels or more the server timed: its lowest
    and its highest level."""
    lines: dict[tuple, list[SplitRow]] = {}
    for r in rows:
        if r.timed:
            p = r.point
            lines.setdefault((p.server, p.task, p.mode, p.phase, p.load.closed), []).append(r)
    out = []
    for found in lines.values():
        found.sort(key=lambda r: level_key(r.point))
        if len(found) >= 2:
            out.append(Growth(found[0], found[-1]))
    return out


# --------------------------------------------------------------------------- writing


NOTE = ("Each request's latency in parts, from the server's own per-request timing (its `metrics` object; vLLM's "
        "request span where that lacks a part): a stream's TTFT = client/network + frontend + queue + prefill and "
        "its E2E = TTFT + decode + tail; a sync request's E2E = client/network + frontend + queue + prefill + "
        "decode. Client/network is what the client measured beyond the server's parts (with the frontend where "
        "the server gives none). Only durations are combined, each measured on one clock. Each part: its mean "
        "[95 % interval] over the requests that have it, and its share of TTFT and of E2E, a ratio of means paired "
        "by request [95 %, within-run] (docs/metrics.md, docs/statistics.md).")
CHECK_NOTE = ("The residual (client/network) beside the client-error bound the run stated of itself: a residual "
              "within the bound is the client's own timing error; beyond it, the network and the server's untimed "
              "path from its first-token stamp to the socket. A residual or tail below 0 is counted, never "
              "clipped: the server's parts then exceed what the client measured.")


NEGATIVE_RESIDUAL = ("Flagged: client/network below 0 (the server's parts exceed the client's latency: a clock or a "
                     "stamp is off; kept as measured): ")
NEGATIVE_TAIL = ("Tail below 0 (the server's decode is longer than the client's first to last chunk: the last "
                 "tokens carried no text, so the client's E2E ended before them, or the first chunk took longer to "
                 "reach the client than the last; counted, kept as measured): ")


def part_text(p: PartFigure) -> str | None:
    """``12.3 [11.8, 12.9]`` ms of a part's mean (``n=8`` where it has no interval)."""
    if p.mean is None:
        return None
    text = number(p.mean * 1000.0)
    if p.interval is not None and p.interval.has_interval:
        return f"{text} [{number(p.interval.low * 1000.0)}, {number(p.interval.high * 1000.0)}]"
    return f"{text} (n={p.n})"


def part_name(row: SplitRow, name: str) -> str:
    """The part's name in a table: the residual says when it holds the frontend."""
    return NAMES[name] + (" + frontend" if name in RESIDUALS and not row.frontend_known else "")


def parts_table(rows: list[SplitRow]) -> Table:
    """One line per point and part: its mean, its shares of TTFT and E2E, its values below 0."""
    body = []
    for r in rows:
        for p in r.parts:
            body.append([r.point.label, part_name(r, p.name), part_text(p),
                         None if p.share_ttft is None else share_text(p.share_ttft),
                         None if p.share_e2e is None else share_text(p.share_e2e), p.negative or None])
    return Table(["cell", "part", "mean ms [95 %]", "% of TTFT", "% of E2E", "below 0"], body)


def checks_table(rows: list[SplitRow]) -> Table:
    """One line per point: the requests timed, malformed, the client's latency, the residual beside the
    client-error bound, the spans joined."""
    spans = any(r.spans is not None for r in rows)
    body = []
    for r in rows:
        residual = r.residual
        total = total_of(r.point.mode)
        line = [r.point.label, f"{r.timed} of {r.requests}", r.malformed or None,
                f"{total.upper()} {number(r.total * 1000.0)}" if r.total is not None else None,
                part_text(residual) if residual else None,
                None if r.client_error_ms is None else number(r.client_error_ms),
                residual.negative if residual else None]
        if spans:
            line.append(None if r.spans is None else
                        f"{r.spans['joined']} joined, {r.spans['requests_without_span']} without, "
                        f"{r.spans['spans_without_request']} stray, {r.spans['duplicate_ids']} duplicate ids")
        body.append(line)
    headers = ["cell", "timed by the server", "malformed timing", "client mean ms", "client/network ms [95 %]",
               "client-error bound ms", "residual < 0"]
    return Table(headers + (["spans"] if spans else []), body)


def untimed_servers(rows: list[SplitRow]) -> list[str]:
    """Servers none of whose requests the server timed."""
    servers = list(dict.fromkeys(r.point.server for r in rows))
    return [s for s in servers if not any(r.timed for r in rows if r.point.server == s)]


def untimed_line(server: str, rows: list[SplitRow]) -> str:
    malformed = sum(r.malformed for r in rows if r.point.server == server)
    why = f"its metrics object was malformed in {malformed} requests (counted)" if malformed else \
        "it returned no per-request metrics (vLLM: --enable-per-request-metrics)"
    return f"{server}: no per-request timing from the server ({why}); its figures are client-only."


def parts(rows: list[SplitRow]) -> list[Paragraph]:
    """The section's paragraphs and tables (nothing where no point has requests)."""
    if not rows:
        return []
    timed = [r for r in rows if r.timed]
    out: list[Paragraph] = [untimed_line(s, rows) for s in untimed_servers(rows)]
    if not timed:
        return out
    out = [NOTE] + out + [parts_table(timed), CHECK_NOTE, checks_table(timed)]
    for names, what in ((RESIDUALS, NEGATIVE_RESIDUAL), (("tail",), NEGATIVE_TAIL)):
        found = [f"{r.point.label}: {p.negative} of {p.n}" for r in timed for p in r.parts
                 if p.name in names and p.negative]
        if found:
            out.append(what + "; ".join(found) + ".")
    sentences = [g.sentence() for g in growth(timed)]
    if sentences:
        out.append("Growth with load: " + "; ".join(sentences) + ".")
    return out


def lines(rows: list[SplitRow]) -> list[str]:
    """The report's section as Markdown lines."""
    found = parts(rows)
    return markdown_section(TITLE, found) if found else []


def figure(rows: list[SplitRow], task: str, mode: str):
    """A plotly stacked bar per server and load level (positive parts up from 0, a negative one below it)."""
    import plotly.graph_objects as go  # heavy: only when a page is written

    mine = [r for r in rows if r.timed and r.point.task == task and r.point.mode == mode]
    x = [[r.point.server for r in mine], [r.point.level for r in mine]]
    fig = go.Figure()
    for name in parts_of(mode):
        found = [r.part(name) for r in mine]
        if not any(p is not None and p.mean is not None for p in found):
            continue
        ys = [None if p is None or p.mean is None else p.mean * 1000.0 for p in found]
        hover = [f"{r.point.label}: {part_name(r, name)} {part_text(p)} ms"
                 + ("" if p.share_ttft is None else f", {share_text(p.share_ttft)} of TTFT")
                 + ("" if p.share_e2e is None else f", {share_text(p.share_e2e)} of E2E")
                 if p is not None and p.mean is not None else "" for r, p in zip(mine, found)]
        fig.add_trace(go.Bar(x=x, y=ys, name=NAMES[name], marker_color=COLOURS[name], hovertext=hover,
                             hoverinfo="text"))
    fig.update_layout(barmode="relative", title={"text": f"{task} {mode}: where the time goes (mean ms per request)",
                                                 "font": {"size": 14}})
    fig.update_yaxes(title_text="ms")
    return fig
