"""The tune's HTML page (``tune.html``): its own sections (:data:`TUNE_SECTIONS`) written by
:func:`reports.html.write_page`, the tables of :mod:`reports.tune` and plotly charts of the Pareto front and the
throughput-latency curves, each point with its intervals."""

from __future__ import annotations

from pathlib import Path

from llmload.core.metrics import column_scale
from reports.format import figure_text, title
from reports.html import PALETTE, Sections, _bars, bullets, chart, esc, paragraph, table, write_page
from reports.tune import (METHOD, OUTPUT, PER_USER, TuneReport, comparisons_table, configs_table, identity,
                          latency_column, pareto_table, ranking_table, searches_table)

#: The tune page's sections, in order.
TUNE_SECTIONS = Sections()


def _colours(report: TuneReport) -> dict[str, str]:
    return {c.name: PALETTE[i % len(PALETTE)] for i, c in enumerate(report.configs)}


def axis_title(column: str) -> str:
    """An axis's title: per-user tok/s by that name, the others as the tables title them."""
    return "per-user tok/s" if column == PER_USER else title(column)


def _slug(task: str, mode: str) -> str:
    return f"{task}-{mode}"


def pareto_figure(report: TuneReport, task: str, mode: str):
    """Output tok/s against per-user tok/s (left) and against TTFT p90 (right): one marker per configuration at
    its capacity with its intervals on both axes; the front's configurations larger, joined by a line."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    points = [p for p in report.pareto if (p.task, p.mode) == (task, mode) and p.output.value is not None]
    latency = latency_column(mode)
    panels = (("per_user", PER_USER, "per-user tok/s (higher is better)"),
              ("latency", latency, f"{title(latency)} (lower is better)"))
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"output tok/s against {p[2]}" for p in panels],
                        horizontal_spacing=0.1)
    colours = _colours(report)
    for col, (axis, column, _) in enumerate(panels, 1):
        scale = column_scale(column)
        shown = [p for p in points if getattr(p, axis).value is not None]
        front = sorted((p for p in shown if getattr(p, f"front_{axis}")), key=lambda p: getattr(p, axis).value)
        if front:
            fig.add_trace(go.Scatter(x=[getattr(p, axis).value * scale for p in front],
                                     y=[p.output.value for p in front], mode="lines", name="Pareto front",
                                     legendgroup="front", showlegend=col == 1,
                                     line={"color": "#444", "width": 2, "dash": "dot"}, hoverinfo="skip"),
                          row=1, col=col)
        for p in shown:
            on = getattr(p, f"front_{axis}")
            y_iv = getattr(p, axis)
            fig.add_trace(go.Scatter(
                x=[y_iv.value * scale], y=[p.output.value], mode="markers+text", name=p.config,
                legendgroup=p.config, showlegend=col == 1, text=[p.config], textposition="top center",
                textfont={"size": 9},
                marker={"color": colours.get(p.config, "#333"), "size": 14 if on else 9,
                        "symbol": "diamond" if on else "circle-open", "line": {"width": 2}},
                error_x=_bars([y_iv.value], [y_iv], scale), error_y=_bars([p.output.value], [p.output], 1.0),
                hovertext=[f"{p.config} at {p.rate:.3g} req/s: {figure_text(OUTPUT, p.output.value, p.output)} out "
                           f"tok/s; {title(column)} {figure_text(column, y_iv.value, y_iv)} ("
                           f"{'on the front' if on else 'dominated'}; intervals {p.covers})"],
                hoverinfo="text"), row=1, col=col)
        fig.update_xaxes(title_text=axis_title(column), row=1, col=col)
        fig.update_yaxes(title_text="output tok/s per server", row=1, col=col)
    fig.update_layout(title={"text": f"{task} {mode}: each configuration at its capacity (95 % intervals; the "
                                     "front's configurations as diamonds)", "font": {"size": 14}, "y": 0.98},
                      margin={"t": 90})
    return fig


def curves_figure(report: TuneReport, task: str, mode: str):
    """Each configuration's throughput-latency curve (its capacity search's steps and any other levels, one line
    per block): latency and per-user tok/s against output tok/s, with intervals; its capacity ringed."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    mine = [p for p in report.curves if (p.task, p.mode) == (task, mode) and p.output.value is not None]
    latency = latency_column(mode)
    panels = (("latency", latency), ("per_user", PER_USER))
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{axis_title(c)} against output tok/s" for _, c in panels],
                        horizontal_spacing=0.1)
    colours = _colours(report)
    lines: dict[tuple[str, int], list] = {}
    for p in mine:
        lines.setdefault((p.config, p.block), []).append(p)
    for (config, block), points in sorted(lines.items()):
        points = sorted(points, key=lambda p: (p.rate is None, p.rate or p.concurrency))  # the saturation run last
        for col, (axis, column) in enumerate(panels, 1):
            shown = [p for p in points if getattr(p, axis).value is not None]
            if not shown:
                continue
            scale = column_scale(column)
            fig.add_trace(go.Scatter(
                x=[p.output.value for p in shown], y=[getattr(p, axis).value * scale for p in shown],
                mode="lines+markers", name=config + (f" (block {block})" if report.blocks > 1 else ""),
                legendgroup=config, showlegend=col == 1,
                line={"color": colours.get(config, "#333"), "dash": "solid" if block == 1 else "dash"},
                marker={"size": [13 if p.at_capacity else 7 for p in shown],
                        "symbol": ["circle-open" if p.at_capacity else "circle" for p in shown]},
                error_x=_bars([p.output.value for p in shown], [p.output for p in shown], 1.0),
                error_y=_bars([getattr(p, axis).value for p in shown], [getattr(p, axis) for p in shown], scale),
                hovertext=[f"{config} block {p.block} {p.level} ({p.phase}{', ' + p.decision if p.decision else ''}"
                           f"{', its capacity' if p.at_capacity else ''}): "
                           f"{figure_text(OUTPUT, p.output.value, p.output)} out tok/s; {title(column)} "
                           f"{figure_text(column, getattr(p, axis).value, getattr(p, axis))}" for p in shown],
                hoverinfo="text"), row=1, col=col)
            fig.update_xaxes(title_text="output tok/s", row=1, col=col)
            fig.update_yaxes(title_text=axis_title(column), row=1, col=col)
    fig.update_layout(title={"text": f"{task} {mode}: throughput against latency, each configuration's load points "
                                     "(95 % intervals; its capacity ringed)", "font": {"size": 14}, "y": 0.98},
                      margin={"t": 90})
    return fig


@TUNE_SECTIONS.section("Best configuration")
def best(report: TuneReport) -> str:
    return "".join(paragraph(b.sentence) for b in report.best)


@TUNE_SECTIONS.section("Ranking")
def ranking(report: TuneReport) -> str:
    out = []
    for task, mode in report.pairs():
        slug = _slug(task, mode)
        out.append(f"<h3>{esc(task)} {esc(mode)}</h3>\n" + table(ranking_table(report, task, mode), f"ranking-{slug}")
                   + paragraph("Each comparison: the capacity ratio with its 95 % interval, how it was made, its "
                               "p-value and Holm's adjustment over these comparisons.")
                   + table(comparisons_table(report, task, mode), f"comparisons-{slug}"))
    return "".join(out)


@TUNE_SECTIONS.section("Pareto front")
def pareto(report: TuneReport) -> str:
    out = []
    for task, mode in report.pairs():
        if not any((p.task, p.mode) == (task, mode) for p in report.pareto):
            continue
        slug = _slug(task, mode)
        out.append(chart(pareto_figure(report, task, mode), f"pareto-{slug}")
                   + paragraph("Not on a front: the configurations that dominate it there, `*` where that is "
                               "significant.") + table(pareto_table(report, task, mode), f"pareto-{slug}"))
    return "".join(out)


@TUNE_SECTIONS.section("Throughput and latency")
def curves(report: TuneReport) -> str:
    return "".join(chart(curves_figure(report, task, mode), f"curves-{_slug(task, mode)}")
                   for task, mode in report.pairs()
                   if any((p.task, p.mode) == (task, mode) for p in report.curves))


@TUNE_SECTIONS.section("Configurations")
def configurations(report: TuneReport) -> str:
    return table(configs_table(report), "configurations")


@TUNE_SECTIONS.section("Capacity searches")
def searches(report: TuneReport) -> str:
    return table(searches_table(report), "searches") if report.searches else ""


@TUNE_SECTIONS.section("Warnings")
def warnings(report: TuneReport) -> str:
    return bullets(report.warnings)


@TUNE_SECTIONS.section("Method")
def method(report: TuneReport) -> str:
    return "".join(paragraph(text) for text in METHOD)


def write_tune_page(report: TuneReport, path: Path) -> Path:
    header = ('<dl class="identity">\n'
              + "".join(f"<dt>{esc(k)}</dt><dd>{paragraph(v)[3:-5]}</dd>\n" for k, v in identity(report))
              + "</dl>\n")
    return write_page(path, f"Tune report: {report.name}", header, TUNE_SECTIONS, report)

