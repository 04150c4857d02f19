"""The report's cost and energy section.

* Cost (run.json's ``--price-per-hour``, per server name): dollars per 1M output
  tokens and per 1,000 requests at each cell's measured throughput, with the
  interval of that throughput carried through (the cost is a decreasing function
  of it), and at each capacity a search found (the cell measured at that rate).
* Energy (the monitor's ``gpu_energy_j`` or ``cpu_energy_j``,
  :mod:`monitors.energy`): joules over the cell's wall time, per output token and
  per successful request; "not available", said once, where no cell recorded one.

The formulas are :mod:`llmload.core.cost`'s and :func:`llmload.core.metrics.ratio`.
"""

from __future__ import annotations

from llmload.core.cost import usd_per_million_tokens, usd_per_thousand_requests
from llmload.core.metrics import ratio
from llmload.core.points import Point
from llmload.core.stats import Interval
from llmload.core.tables import render
from monitors.energy import SOURCES, energy_between
from reports.format import number
from reports.rows import Row
from reports.run import RunData

#: Cost figure -> (its formula, the throughput it is taken at).
COSTS = {"usd_per_million_output_tokens": (usd_per_million_tokens, "output_token_throughput"),
         "usd_per_thousand_requests": (usd_per_thousand_requests, "request_throughput")}
COST_COLUMNS = (["server", "task", "mode", "concurrency", "rate", "repeat", "phase", "price_per_hour",
                 "output_token_throughput", "request_throughput"]
                + [f"{c}{s}" for c in COSTS for s in ("", "_ci_low", "_ci_high")]
                + ["energy_j", "energy_source", "j_per_output_token", "j_per_request"])
CAPACITY_COST_COLUMNS = ["server", "task", "mode", "capacity_rps", "price_per_hour", "output_token_throughput",
                         "request_throughput", "usd_per_million_output_tokens", "usd_per_thousand_requests"]


def prices_of(run: RunData) -> dict[str, float]:
    """Server name -> USD per hour, as the runner's ``--price-per-hour`` recorded it in run.json."""
    found = (run.manifest.get("settings") or {}).get("price_per_hour") or {}
    return {str(k): float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def cost_interval(column: str, price: float, iv: Interval | None) -> tuple[float | None, float | None]:
    """The cost's interval from its throughput's: ``[cost(high), cost(low)]``."""
    if iv is None or not iv.has_interval:
        return None, None
    formula = COSTS[column][0]
    return formula(price, iv.high), formula(price, iv.low)


def cell_energy(data) -> dict:
    """Joules over the cell's wall time (its first successful start plus the summary's wall time)."""
    summary = data.summary
    starts = [r.start_time for r in data.measured if r.success]
    if summary is None or not starts:
        return {}
    first = min(starts)
    joules, column = energy_between(data.monitor, first, first + summary.duration_s)
    if joules is None:
        return {}
    return {"energy_j": joules, "energy_source": SOURCES[column],
            "j_per_output_token": ratio(joules, summary.total_output_tokens),
            "j_per_request": ratio(joules, summary.requests - summary.failures)}


def cost_rows(run: RunData, rows: list[Row]) -> list[dict]:
    """One row per ok cell: its price, throughputs, costs with intervals, and energy (``rows``: the report's
    cell rows, in the run's cell order)."""
    prices = prices_of(run)
    out = []
    for data, row in zip(run.cells, rows):
        if not data.ok or data.summary is None:
            continue
        cell = data.cell
        price = prices.get(cell.server)
        line = {k: row.get(k) for k in ("server", "task", "mode", "concurrency", "rate", "repeat", "phase",
                                         "output_token_throughput", "request_throughput")}
        line["price_per_hour"] = price
        for column, (formula, throughput) in COSTS.items():
            line[column] = formula(price, row.get(throughput))
            if price is not None:
                line[f"{column}_ci_low"], line[f"{column}_ci_high"] = cost_interval(
                    column, price, row.interval(throughput))
        line.update(cell_energy(data))
        out.append(line)
    return out


def capacity_cost_rows(run: RunData, rows: list[Row]) -> list[dict]:
    """Per capacity search that found a rate, with a price: the costs at the throughput measured at that rate."""
    prices = prices_of(run)
    by_prefix = {data.cell.prefix: row for data, row in zip(run.cells, rows)}
    out = []
    for entry in run.capacity:
        price, capacity = prices.get(entry.get("server")), entry.get("capacity_rps")
        held = (entry.get("bracket") or [None])[0]  # the highest rate that held: the one measured
        step = next((s for s in entry.get("steps") or [] if s.get("rate") == held), None)
        row = by_prefix.get(step.get("prefix")) if step else None
        if price is None or capacity is None or row is None:
            continue
        out.append({"server": entry.get("server"), "task": entry.get("task"), "mode": entry.get("mode"),
                    "capacity_rps": capacity, "price_per_hour": price,
                    "output_token_throughput": row.get("output_token_throughput"),
                    "request_throughput": row.get("request_throughput"),
                    **{column: formula(price, row.get(throughput)) for column, (formula, throughput) in COSTS.items()}})
    return out


def usd(value) -> str | None:
    return None if value is None else f"${number(value)}"


def usd_text(row: dict, column: str) -> str | None:
    text = usd(row.get(column))
    low, high = row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
    return text if text is None or low is None else f"{text} [{usd(low)}, {usd(high)}]"


NOT_AVAILABLE = ("Energy per token: not available: no cell's monitor recorded an energy counter (NVML's GPU "
                 "energy counter where a GPU is present, RAPL's CPU package counters under /sys/class/powercap where "
                 "readable).")


def lines(cost: list[dict], capacity: list[dict]) -> list[str]:
    """The section (nothing when the run has no ok cell)."""
    if not cost:
        return []
    parts = ["## Cost and energy", ""]
    priced = [r for r in cost if r.get("price_per_hour") is not None]
    if priced:
        parts += ["At each server's price per hour (`--price-per-hour`): dollars per 1M output tokens and per 1,000 "
                  "requests at the cell's measured throughput, with the 95 % interval of that throughput carried "
                  "through.", "",
                  render([[Point.of(r).label, usd(r["price_per_hour"]), number(r["output_token_throughput"] or 0),
                           usd_text(r, "usd_per_million_output_tokens"), usd_text(r, "usd_per_thousand_requests")]
                          for r in priced],
                         ["cell", "$/hour", "out tok/s", "$ per 1M output tokens", "$ per 1,000 requests"]), ""]
    else:
        parts += ["No price per hour given (`--price-per-hour NAME=USD,...`): no cost figures.", ""]
    if capacity:
        parts += ["At the capacity each search found (the throughput measured at that rate):", "",
                  render([[r["server"], r["task"], r["mode"], number(r["capacity_rps"]), usd(r["price_per_hour"]),
                           usd(r["usd_per_million_output_tokens"]), usd(r["usd_per_thousand_requests"])]
                          for r in capacity],
                         ["server", "task", "mode", "capacity req/s", "$/hour", "$ per 1M output tokens",
                          "$ per 1,000 requests"]), ""]
    measured = [r for r in cost if r.get("energy_j") is not None]
    if measured:
        parts += ["Energy over each cell's wall time from the monitor's counter (whole devices: the GPU's every "
                  "process, or the CPU package's, load generator included where it shares the machine); no "
                  "interval: one counter reading per cell.", "",
                  render([[Point.of(r).label, number(r["energy_j"]), None if r["j_per_output_token"] is None else
                           number(r["j_per_output_token"]), None if r["j_per_request"] is None else
                           number(r["j_per_request"]), r["energy_source"]] for r in measured],
                         ["cell", "energy J", "J per output token", "J per request", "counter"]), ""]
    else:
        parts += [NOT_AVAILABLE, ""]
    return parts
