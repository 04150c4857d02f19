"""The web UI's "LLM metrics" tab: exact TTFT percentiles, output tokens/s and requests/s, live.

Locust's React UI shows extra tabs declared in ``template_args`` (``extended_tabs``,
``extended_tables``, ``extended_csv_files``) and fills them from an
``extended_stats`` list in its ``/stats/requests`` poll, which this module adds
to the response. The figures come from :func:`llmload.core.metrics.summarize` over
the raw results collected so far (exact, unlike Locust's rounded percentiles),
one row per task and one for all tasks. Two more routes serve the raw log
(``/llmload/requests.jsonl``) and the summary as CSV (``/llmload/summary.csv``).
"""

from __future__ import annotations

import csv
import io
import json

from flask import Response, request

from llmload.core.metrics import RunSummary, summarize

TAB_KEY = "llm-metrics"
#: Column key -> title. Keys are single lower-case words: the UI camel-cases keys of the polled JSON.
COLUMNS = {
    "task": "Task",
    "requests": "Requests",
    "failures": "Failures",
    "rps": "Requests/s",
    "tokps": "Output tokens/s",
    "ttftmedian": "TTFT p50 (ms)",
    "ttftninety": "TTFT p90 (ms)",
    "ttftmax": "TTFT p99 (ms)",
    "tpot": "TPOT mean (ms)",
    "latency": "E2E p50 (ms)",
}


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value * 1000:.1f}"


def summary_row(task: str, s: RunSummary) -> dict:
    """One table row (formatted strings) of a run summary."""
    return {"task": task, "requests": s.requests, "failures": s.failures, "rps": f"{s.request_throughput:.2f}",
            "tokps": f"{s.output_token_throughput:.1f}", "ttftmedian": _ms(s.get("ttft", "p50")),
            "ttftninety": _ms(s.get("ttft", "p90")), "ttftmax": _ms(s.get("ttft", "p99")), "tpot": _ms(s.get("tpot", "mean")),
            "latency": _ms(s.get("e2e", "p50"))}


def summaries(results) -> dict[str, RunSummary]:
    """Summary per task, and over all tasks (key ``"all"``) when there are several."""
    tasks = sorted({r.task for r in results})
    out = {task: summarize([r for r in results if r.task == task]) for task in tasks}
    if len(tasks) != 1:
        out["all"] = summarize(results)
    return out


def install(environment, plugin) -> None:
    """Add the tab, its data and the download routes to ``environment.web_ui``."""
    web_ui = environment.web_ui
    web_ui.template_args["extended_tabs"] = [{"title": "LLM metrics", "key": TAB_KEY}]
    web_ui.template_args["extended_tables"] = [
        {"key": TAB_KEY, "structure": [{"key": key, "title": title} for key, title in COLUMNS.items()]}]
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./llmload/requests.jsonl", "title": "Download raw per-request log (JSONL)"},
        {"href": "./llmload/summary.csv", "title": "Download LLM metrics summary CSV (exact)"},
    ]
    cache: dict = {"count": -1, "rows": []}

    def rows() -> list[dict]:
        results = plugin.results
        if cache["count"] != len(results):  # summarise again only when new results arrived
            cache["rows"] = [summary_row(task, s) for task, s in summaries(list(results)).items()]
            cache["count"] = len(results)
        return cache["rows"]

    @web_ui.app.after_request
    def add_llm_metrics(response):
        if request.path.endswith("/stats/requests") and response.is_json:
            data = response.get_json()
            data["extended_stats"] = [{"key": TAB_KEY, "data": rows()}]
            response.set_data(json.dumps(data))
        return response

    @web_ui.app.route("/llmload/requests.jsonl")
    @web_ui.auth_required_if_enabled
    def raw_log() -> Response:
        body = "".join(r.to_json() + "\n" for r in plugin.results)
        return Response(body, mimetype="application/x-ndjson",
                        headers={"Content-Disposition": "attachment;filename=requests.jsonl"})

    @web_ui.app.route("/llmload/summary.csv")
    @web_ui.auth_required_if_enabled
    def summary_csv() -> Response:
        out = io.StringIO()
        writer = None
        for task, s in summaries(list(plugin.results)).items():
            row = {"task": task, **s.flat()}
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=list(row))
                writer.writeheader()
            writer.writerow(row)
        return Response(out.getvalue(), mimetype="text/csv",
                        headers={"Content-Disposition": "attachment;filename=llm_summary.csv"})
