"""The web UI's "LLM metrics" tab: run-so-far figures per task, live, from the fixed-size live board.

Locust's React UI shows extra tabs declared in ``template_args`` (``extended_tabs``,
``extended_tables``, ``extended_csv_files``) and fills them from an
``extended_stats`` list in its ``/stats/requests`` poll, which this module adds
to the response. The columns are the catalogue's headline columns
(:func:`llmload.core.metrics.headline_columns`); every poll reads the
:class:`~llmload.loadgen.live.LiveBoard`, whose cost does not grow with the
number of results. Routes: ``/llmload/live.json`` (the sliding window and its
history), ``/llmload/requests.jsonl`` (the raw log, streamed from disk) and
``/llmload/summary.csv``.
"""

from __future__ import annotations

import csv
import io
import json

from flask import Response, jsonify, request, stream_with_context

from llmload.core.metrics import RunSummary, column_scale, column_title, headline_columns

TAB_KEY = "llm-metrics"
CHUNK_BYTES = 1 << 16


def ui_key(column: str) -> str:
    """A column's key in the polled JSON: one lower-case word (the UI camel-cases keys with underscores)."""
    return column.replace("_", "")


def columns() -> list[str]:
    return headline_columns()


def summary_row(task: str, summary: RunSummary) -> dict:
    """One table row (formatted strings) of a run summary."""
    flat = summary.flat()
    row = {"task": task}
    for column in columns():
        value = flat.get(column)
        if isinstance(value, float):
            shown = value * column_scale(column)
            row[ui_key(column)] = f"{shown:.2f}" if abs(shown) < 100 else f"{shown:.1f}"
        else:
            row[ui_key(column)] = "" if value is None else value
    return row


def install(environment, plugin) -> None:
    """Add the tab, its data and the download routes to ``environment.web_ui``."""
    web_ui = environment.web_ui
    structure = [{"key": "task", "title": "Task"}] + [{"key": ui_key(c), "title": column_title(c)}
                                                     for c in columns()]
    web_ui.template_args["extended_tabs"] = [{"title": "LLM metrics", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [{"key": TAB_KEY, "structure": structure}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llmload/requests.jsonl", "title": "Download raw per-request log (JSONL)"},
        {"href": "./llmload/summary.csv", "title": "Download LLM metrics summary CSV"},
    ]

    @web_ui.app.after_request
    def add_llm_metrics(response):
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": [summary_row(task, s) for task, s in
                                                                 plugin.board.summaries().items()]}]
            response.set_data(json.dumps(data))
        return response

    @web_ui.app.route("/llmload/live.json")
    @web_ui.auth_required_if_enabled
    def live() -> Response:
        return jsonify({"window": plugin.board.window(), "history": list(plugin.board.history)[-600:]})

    @web_ui.app.route("/llmload/requests.jsonl")
    @web_ui.auth_required_if_enabled
    def raw_log() -> Response:
        path = plugin.raw_log.path if plugin.raw_log is not None else None
        if path is None or not path.is_file():
            return Response("no raw log: give --csv PREFIX or --raw-log PATH\n", status=404, mimetype="text/plain")
        if not plugin.raw_log.closed:
            plugin.raw_log.flush()

        def chunks():
            with path.open("rb") as handle:
                while block := handle.read(CHUNK_BYTES):
                    yield block

        return Response(stream_with_context(chunks()), mimetype="application/x-ndjson",
                        headers={"Content-Disposition": "attachment;filename=requests.jsonl"})

    @web_ui.app.route("/llmload/summary.csv")
    @web_ui.auth_required_if_enabled
    def summary_csv() -> Response:
        out = io.StringIO()
        writer = None
        for task, s in plugin.board.summaries().items():
            row = {"task": task, **s.flat()}
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
        return Response(out.getvalue(), mimetype="text/csv",
                        headers={"Content-Disposition": "attachment;filename=llm_summary.csv"})
