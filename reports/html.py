"""The HTML report: one self-contained page per run (``report.html``), written from the typed report.

The page is a header (the run's identity) and its sections in order. Each
section is one function registered on a :class:`Sections` registry: it takes the
report and returns the section's HTML ("" where the report has nothing for it),
and the page gives it its heading, its anchor and its line in the contents. A
new section is one function, placed where it belongs without touching the rest::

    @RUN_SECTIONS.section(timing.TITLE, after="Throughput and latency")
    def time_split(report: Report) -> str:
        return parts(timing.parts(report.time_split)) + chart(timing.figure(...), "time-split-qa-stream")

Another page (a tuning report) keeps its own :class:`Sections` and writes itself
with :func:`write_page`. Every text goes through :func:`html.escape`
(:func:`esc`, :func:`paragraph`, :func:`table`); tables are HTML tables, so the
page reads without JavaScript. Charts are plotly's (:func:`chart`): plotly.js is
embedded once in the page's head, so it opens without a network.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from llmload.core.metrics import column_scale
from llmload.core.stats import Interval
from reports import content, cost, failures, sections, steady, timing
from reports.format import Part, Table, figure_text, ratio_text, title
from reports.report import Report
from reports.rows import RATIO_COLUMNS, Row

REPORT_HTML = "report.html"


# --------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Section:
    """One section of a page: its title and the function that renders it (object -> HTML, "" to leave it out)."""

    title: str
    render: Callable[[Any], str]

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")


class Sections:
    """The sections of one kind of page, in order."""

    def __init__(self) -> None:
        self.items: list[Section] = []

    def section(self, title: str, after: str | None = None):
        """Register the decorated function as the section ``title``: at the end, or right after the section
        titled ``after``; a title is registered once."""

        def register(render: Callable[[Any], str]) -> Callable[[Any], str]:
            if any(s.title == title for s in self.items):
                raise ValueError(f"a section titled {title!r} is already registered")
            place = len(self.items)
            if after is not None:
                place = next((i + 1 for i, s in enumerate(self.items) if s.title == after), None)
                if place is None:
                    raise ValueError(f"no section titled {after!r} to place {title!r} after")
            self.items.insert(place, Section(title, render))
            return render

        return register

    def titles(self) -> list[str]:
        return [s.title for s in self.items]

    def __iter__(self):
        return iter(self.items)


#: The run report's sections.
RUN_SECTIONS = Sections()


# --------------------------------------------------------------------------- building blocks


def esc(value) -> str:
    """A value as escaped text (None: empty)."""
    return "" if value is None else html.escape(str(value))


def paragraph(text: str) -> str:
    """A paragraph of escaped text; Markdown's backticks become ``<code>``."""
    return "<p>" + re.sub(r"`([^`]*)`", r"<code>\1</code>", esc(text)) + "</p>\n"


def bullets(lines: list[str]) -> str:
    return "<ul>\n" + "".join(f"<li>{esc(line)}</li>\n" for line in lines) + "</ul>\n" if lines else ""


def table(t: Table, name: str = "") -> str:
    """An HTML table of escaped cells (``name``: its ``data-table`` attribute)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>\n" for row in t.body)
    attr = f' data-table="{esc(name)}"' if name else ""
    return f"<table{attr}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def parts(found: list[Part], name: str = "") -> str:
    """A section's paragraphs and tables (:data:`reports.format.Part`)."""
    out = []
    for i, part in enumerate(found):
        out.append(paragraph(part) if isinstance(part, str) else table(part, f"{name}-{i}" if name else ""))
    return "".join(out)


def chart(figure, name: str) -> str:
    """A plotly figure drawn into the page (``name``: unique in the page); the page embeds plotly.js once."""
    import plotly.io  # heavy: only when a page is written

    margin = {"l": 60, "r": 20, "t": 50, "b": 50, **figure.layout.margin.to_plotly_json()}  # the figure's own first
    figure.update_layout(template="plotly_white", margin=margin, height=420, legend={"font": {"size": 11}})
    spec = plotly.io.to_json(figure, validate=False).replace("</", "<\\/")
    ident = "chart-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name)
    return (f'<div class="chart" id="{ident}" data-chart="{esc(name)}"></div>\n'
            f'<script>(function(){{var f={spec};Plotly.newPlot("{ident}",f.data,f.layout,'
            '{"responsive":true,"displaylogo":false});})();</script>\n'
            "<noscript><p>(a chart: it needs JavaScript; the tables hold its figures)</p></noscript>\n")


STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.3em;margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0;font-size:.85em;display:block;overflow-x:auto}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;white-space:nowrap}
thead th{background:#f3f3f3;position:sticky;top:0}
tbody tr:nth-child(even){background:#fafafa}
code{background:#f3f3f3;padding:0 .2em;border-radius:3px}
dl.identity{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dl.identity dt{font-weight:600}
nav ul{columns:3;font-size:.9em}.chart{width:100%;min-height:420px}
"""


def write_page(path: Path, heading: str, header: str, registry: Sections, obj) -> Path:
    """Write a page: ``heading``, the ``header`` HTML, then every section of ``registry`` that ``obj`` has."""
    import plotly.offline  # heavy: only when a page is written

    rendered = [(s, s.render(obj)) for s in registry]
    rendered = [(s, body) for s, body in rendered if body]
    contents = "".join(f'<li><a href="#{s.anchor}">{esc(s.title)}</a></li>' for s, _ in rendered)
    body = "".join(f'<section id="{s.anchor}">\n<h2>{esc(s.title)}</h2>\n{text}</section>\n' for s, text in rendered)
    page = (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{esc(heading)}</title>\n'
            f"<style>{STYLE}</style>\n<script>{plotly.offline.get_plotlyjs()}</script>\n</head>\n<body>\n"
            f"<h1>{esc(heading)}</h1>\n{header}<nav><ul>{contents}</ul></nav>\n{body}</body>\n</html>\n")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


def write_html(report: Report, path: Path) -> Path:
    """The run's page: its identity, then :data:`RUN_SECTIONS`."""
    header = ('<dl class="identity">\n'
              + "".join(f"<dt>{esc(k)}</dt><dd>{paragraph(v)[3:-5]}</dd>\n" for k, v in content.identity(report))
              + "</dl>\n")
    return write_page(path, f"Load-test report: {report.run.name}", header, RUN_SECTIONS, report)


# --------------------------------------------------------------------------- the run's charts


#: One colour per server, in the order of their names (matplotlib's and plotly's default cycle).
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


def _bars(values: list, ivs: list[Interval | None], scale: float) -> dict | None:
    """Plotly's asymmetric error bars of ``values`` from their intervals (None where a point has none)."""
    plus = [None if v is None or iv is None or not iv.has_interval else (iv.high - v) * scale
            for v, iv in zip(values, ivs)]
    minus = [None if v is None or iv is None or not iv.has_interval else (v - iv.low) * scale
             for v, iv in zip(values, ivs)]
    if all(p is None for p in plus):
        return None
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "thickness": 1}


def _level(row: Row) -> tuple:
    load = row.point.load
    return (0 if load.closed else 1, load.concurrency if load.closed else load.rate)


def curve_figure(rows: list[Row], task: str):
    """Output tok/s against TTFT p90 (E2E p90 where no point streamed) and per-user tok/s, one line per server
    and mode across its load levels, with each figure's 95 % interval as error bars."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    mine = [r for r in rows if r.ok and r.point.task == task and r.point.phase != "capacity"
            and r.get("output_token_throughput") is not None]
    latency = "ttft_p90" if any(r.get("ttft_p90") is not None for r in mine) else "e2e_p90"
    panels = ((latency, f"{title(latency)} vs output tok/s"), ("tokens_per_s_mean", "per-user tok/s vs output tok/s"))
    fig = make_subplots(rows=1, cols=2, subplot_titles=[p[1] for p in panels], horizontal_spacing=0.1)
    lines: dict[tuple, list[Row]] = {}
    for r in mine:
        lines.setdefault((r.point.server, r.point.mode), []).append(r)
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted({k[0] for k in lines}))}
    for (server, mode), points in sorted(lines.items()):
        points = sorted(points, key=_level)
        colour = colours[server]
        for col, (column, _) in enumerate(panels, 1):
            shown = [r for r in points if r.get(column) is not None]
            if not shown:
                continue
            scale = column_scale(column)
            xs = [r.get("output_token_throughput") for r in shown]
            ys = [r.get(column) for r in shown]
            fig.add_trace(go.Scatter(
                x=xs, y=[y * scale for y in ys], mode="lines+markers+text", name=f"{server} {mode}",
                legendgroup=f"{server} {mode}", showlegend=col == 1, text=[r.point.level for r in shown],
                textposition="top center", textfont={"size": 9},
                line={"color": colour, "dash": "dash" if mode == "sync" else "solid"},
                hovertext=[f"{server} {mode} {r.point.level}: {figure_text('output_token_throughput', x, r.interval('output_token_throughput'))} out tok/s; "
                           f"{title(column)} {figure_text(column, y, r.interval(column))}" for r, x, y in zip(shown, xs, ys)],
                hoverinfo="text",
                error_x=_bars(xs, [r.interval("output_token_throughput") for r in shown], 1.0),
                error_y=_bars(ys, [r.interval(column) for r in shown], scale)), row=1, col=col)
            fig.update_yaxes(title_text=title(column), row=1, col=col)
            fig.update_xaxes(title_text="output tok/s", row=1, col=col)
    fig.update_layout(title={"text": f"{task}: throughput against latency across load levels (95 % intervals)",
                             "font": {"size": 14}, "y": 0.98}, margin={"t": 90})
    return fig


def ratio_figure(report: Report):
    """Each headline ratio (baseline / server) with its 95 % interval, one marker per point and figure, log scale
    (a ratio of too few pairs to be estimated is left out, as the table says)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    drawn = [r for r in report.ratios if r.interval.value is not None]
    for metric in [m for m in RATIO_COLUMNS if any(r.metric == m for r in drawn)]:
        mine = [r for r in drawn if r.metric == metric]
        labels = [f"{r.get('ratio')} {r.bottom.point.task} {r.bottom.point.mode} {r.bottom.point.level}" for r in mine]
        values = [r.value for r in mine]
        fig.add_trace(go.Scatter(x=values, y=labels, mode="markers", name=title(metric),
                                 hovertext=[f"{label}: {title(metric)} {ratio_text(r.interval)}"
                                            for label, r in zip(labels, mine)], hoverinfo="text",
                                 error_x=_bars(values, [r.interval for r in mine], 1.0)))
    fig.add_vline(x=1.0, line={"color": "grey", "width": 1})
    fig.update_xaxes(type="log", title_text=f"{report.baseline} / server")
    fig.update_layout(title={"text": "Ratios with their 95 % intervals (above 1: the baseline's figure is larger)",
                             "font": {"size": 14}})
    return fig


DECISION_SYMBOLS = {"held": "circle-open", "failed": "x-open", "undecided": "square-open"}


def capacity_figure(report: Report, task: str):
    """Each search's steps: SLO attainment against offered rate with its Clopper-Pearson bounds, marked by decision;
    the target attainment; the capacity as a dashed line with its interval shaded."""
    import plotly.graph_objects as go

    fig = go.Figure()
    steps = [s for s in report.goodput_steps if s.task == task and s.rate is not None and s.attainment is not None]
    searches = [c for c in report.capacity if c.task == task]
    servers = sorted({s.server for s in steps} | {c.server for c in searches})
    for i, server in enumerate(servers):
        colour = PALETTE[i % len(PALETTE)]
        mine = sorted((s for s in steps if s.server == server), key=lambda s: s.rate)
        if mine:
            bounds = [Interval(s.attainment, s.attainment_low, s.attainment_high) for s in mine]
            fig.add_trace(go.Scatter(
                x=[s.rate for s in mine], y=[s.attainment for s in mine], mode="markers", name=server,
                marker={"symbol": [DECISION_SYMBOLS.get(s.decision or "", "circle") for s in mine], "size": 10,
                        "color": colour},
                error_y=_bars([s.attainment for s in mine], bounds, 1.0),
                hovertext=[f"{server}: {s.rate:g} req/s offered: SLO met by {s.attainment:.3g} % "
                           + ("" if s.attainment_low is None else f"[{s.attainment_low:.3g}, {s.attainment_high:.3g}] ")
                           + ("" if s.goodput is None else f"(goodput {s.goodput:.3g} req/s) ") + f"{s.decision}"
                           for s in mine], hoverinfo="text"))
        for c in searches:
            if c.server != server or c.capacity_rps is None:
                continue
            fig.add_vline(x=c.capacity_rps, line={"color": colour, "dash": "dash", "width": 1})
            if c.ci_low is not None:
                fig.add_vrect(x0=c.ci_low, x1=c.ci_high if c.ci_high is not None else c.capacity_rps,
                              fillcolor=colour, opacity=0.12, line_width=0)
    for target in sorted({c.slo_target for c in searches if c.slo_target is not None}):
        fig.add_hline(y=target, line={"color": "grey", "dash": "dot", "width": 1})
    fig.update_xaxes(title_text="offered requests/s")
    fig.update_yaxes(title_text="requests within the SLO (%)")
    fig.update_layout(title={"text": f"{task}: capacity search (steps: circle held, x failed, square undecided, "
                                     "with 95 % bounds; dotted: the target; capacity dashed, its interval shaded)",
                             "font": {"size": 13}})
    return fig


# --------------------------------------------------------------------------- the run's sections


@RUN_SECTIONS.section("Summary")
def summary(report: Report) -> str:
    matrix, _ = content.main_rows(report)
    out = paragraph(content.LEAD) + paragraph(content.run_to_run_note(report))
    return out + (table(content.summary_table(matrix, report.peaks), "summary") if matrix else "")


@RUN_SECTIONS.section("Throughput and latency")
def throughput_latency(report: Report) -> str:
    tasks = sorted({r.point.task for r in report.groups if r.ok and r.point.phase != "capacity"
                    and r.get("output_token_throughput") is not None})
    return "".join(chart(curve_figure(report.groups, task), f"curve-{task}") for task in tasks)


@RUN_SECTIONS.section(timing.TITLE, after="Throughput and latency")
def time_split(report: Report) -> str:
    rows = report.time_split or []
    panels = dict.fromkeys((r.point.task, r.point.mode) for r in rows if r.timed)
    return parts(timing.parts(rows), "time-split") + "".join(
        chart(timing.figure(rows, task, mode), f"time-split-{task}-{mode}") for task, mode in panels)


@RUN_SECTIONS.section("Sweep and capacity cells")
def sweep(report: Report) -> str:
    _, other = content.main_rows(report)
    return table(content.summary_table(other, report.peaks), "sweep") if other else ""


@RUN_SECTIONS.section("Ratios")
def ratios(report: Report) -> str:
    if not report.ratios:
        return ""
    return (paragraph(f"{report.baseline} over each server. " + content.ratio_note(report))
            + table(content.ratio_table(report.ratios), "ratios") + chart(ratio_figure(report), "ratios"))


@RUN_SECTIONS.section("Capacity at SLO")
def capacity(report: Report) -> str:
    if not report.capacity:
        return ""
    tasks = sorted({c.task for c in report.capacity if c.task is not None})
    return (paragraph(content.CAPACITY_NOTE) + table(content.capacity_table(report), "capacity")
            + bullets([sections.capacity_sentence(r) for r in report.capacity_ratios])
            + "".join(chart(capacity_figure(report, task), f"capacity-{task}") for task in tasks))


@RUN_SECTIONS.section("Warnings")
def warnings(report: Report) -> str:
    return bullets(report.warnings)


@RUN_SECTIONS.section(failures.TITLE, after="Warnings")
def failure_section(report: Report) -> str:
    return parts(failures.parts(report.failures), "failures")


@RUN_SECTIONS.section("Repeats")
def repeats(report: Report) -> str:
    return (paragraph(content.REPEATS_NOTE) + table(content.repeats_table(report), "repeats")
            if report.repeats else "")


@RUN_SECTIONS.section("Multi-turn conversations")
def turns(report: Report) -> str:
    return (paragraph(content.TURNS_NOTE) + table(content.turns_table(report), "turns")
            if report.turns else "")


@RUN_SECTIONS.section("Cancellation")
def cancellation(report: Report) -> str:
    return parts(sections.cancel_parts(report.series), "cancel")


@RUN_SECTIONS.section("Order of the cells")
def order(report: Report) -> str:
    if not report.order:
        return ""
    return (paragraph(f"As run: {sections.order_text(report.run.manifest) or 'see order.csv'}.")
            + table(content.order_table(report), "order"))


@RUN_SECTIONS.section("Prefix caching")
def prefix(report: Report) -> str:
    return (paragraph(content.PREFIX_NOTE) + table(content.prefix_table(report), "prefix")
            if report.prefix else "")


@RUN_SECTIONS.section(steady.TITLE)
def steady_state(report: Report) -> str:
    return parts(steady.parts(report.steady, figure_text), "steady")


@RUN_SECTIONS.section(cost.TITLE)
def cost_energy(report: Report) -> str:
    return parts(cost.parts(report.cost, report.capacity_cost), "cost") if report.cost else ""


@RUN_SECTIONS.section("Output tokens")
def output_tokens(report: Report) -> str:
    out = paragraph(content.tokens_note(report))
    if report.tokens:
        out += table(content.tokens_table(report), "tokens") + bullets(content.flagged_tokens(report))
    return out


@RUN_SECTIONS.section("Missing or failed cells")
def missing(report: Report) -> str:
    return bullets(content.missing_cells(report)) if any(not r.ok for r in report.rows) else ""
