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

from dataclasses import dataclass, field

from llmload.core.cost import usd_per_million_tokens, usd_per_thousand_requests
from llmload.core.metrics import ratio
from llmload.core.points import Point
from llmload.core.stats import Interval
from monitors.energy import SOURCES, energy_between
from reports.format import Part, Table, markdown_section, number
from reports.records import Number, Record
from reports.rows import Row
from reports.run import RunData

TITLE = "Cost and energy"
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


def cost_interval(column: str, price: float | None, throughput: float | None, iv: Interval | None) -> Interval:
    """The cost at ``throughput`` with its interval from the throughput's (``iv``): ``[cost(high), cost(low)]``
    (none without a price or an interval)."""
    formula = COSTS[column][0]
    value = formula(price, throughput)
    if price is None or iv is None or not iv.has_interval:
        return Interval(value)
    return Interval(value, formula(price, iv.high), formula(price, iv.low), iv.n, iv.covers,
                    f"the throughput's interval carried through ({iv.method})" if iv.method else "")


@dataclass
class CostRow(Record):
    """One ok cell's price, throughputs, costs (each with the interval its throughput's carries) and energy."""

    point: Point
    repeat: int | None
    price_per_hour: Number
    output_token_throughput: Number
    request_throughput: Number
    costs: dict[str, Interval] = field(default_factory=dict)  # COSTS' figures
    energy_j: Number = None
    energy_source: str | None = None
    j_per_output_token: Number = None
    j_per_request: Number = None

    def record(self) -> dict:
        out = {**self.point.record(), "repeat": self.repeat, "price_per_hour": self.price_per_hour,
               "output_token_throughput": self.output_token_throughput,
               "request_throughput": self.request_throughput}
        for column, iv in self.costs.items():
            out.update({column: iv.value, f"{column}_ci_low": iv.low, f"{column}_ci_high": iv.high})
        out.update(energy_j=self.energy_j, energy_source=self.energy_source,
                   j_per_output_token=self.j_per_output_token, j_per_request=self.j_per_request)
        return out


@dataclass
class CapacityCostRow(Record):
    """The costs at the throughput a capacity search measured at the capacity it found."""

    server: str | None
    task: str | None
    mode: str | None
    capacity_rps: Number
    price_per_hour: Number
    output_token_throughput: Number
    request_throughput: Number
    costs: dict[str, Number] = field(default_factory=dict)  # COSTS' figures

    def record(self) -> dict:
        return {"server": self.server, "task": self.task, "mode": self.mode, "capacity_rps": self.capacity_rps,
                "price_per_hour": self.price_per_hour, "output_token_throughput": self.output_token_throughput,
                "request_throughput": self.request_throughput, **self.costs}


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


def cost_rows(run: RunData, rows: list[Row]) -> list[CostRow]:
    """One row per ok cell: its price, throughputs, costs with intervals, and energy (``rows``: the report's
    cell rows, in the run's cell order)."""
    prices = prices_of(run)
    out = []
    for data, row in zip(run.cells, rows):
        if not data.ok or data.summary is None:
            continue
        price = prices.get(data.cell.server)
        costs = {column: cost_interval(column, price, row.get(throughput), row.interval(throughput))
                 for column, (_, throughput) in COSTS.items()}
        out.append(CostRow(row.point, row.repeat, price, row.get("output_token_throughput"),
                           row.get("request_throughput"), costs, **cell_energy(data)))
    return out


def capacity_cost_rows(run: RunData, rows: list[Row]) -> list[CapacityCostRow]:
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
        out.append(CapacityCostRow(entry.get("server"), entry.get("task"), entry.get("mode"), capacity, price,
                                   row.get("output_token_throughput"), row.get("request_throughput"),
                                   {column: formula(price, row.get(throughput))
                                    for column, (formula, throughput) in COSTS.items()}))
    return out


def usd(value) -> str | None:
    return None if value is None else f"${number(value)}"


def usd_text(iv: Interval) -> str | None:
    text = usd(iv.value)
    return text if text is None or iv.low is None else f"{text} [{usd(iv.low)}, {usd(iv.high)}]"


NOT_AVAILABLE = ("Energy per token: not available: no cell's monitor recorded an energy counter (NVML's GPU "
                 "energy counter where a GPU is present, RAPL's CPU package counters under /sys/class/powercap where "
                 "readable).")


PRICED_NOTE = ("At each server's price per hour (`--price-per-hour`): dollars per 1M output tokens and per 1,000 "
               "requests at the cell's measured throughput, with the 95 % interval of that throughput carried through.")
UNPRICED_NOTE = "No price per hour given (`--price-per-hour NAME=USD,...`): no cost figures."
CAPACITY_NOTE = "At the capacity each search found (the throughput measured at that rate):"
ENERGY_NOTE = ("Energy over each cell's wall time from the monitor's counter (whole devices: the GPU's every process, "
               "or the CPU package's, load generator included where it shares the machine); no interval: one counter "
               "reading per cell.")
PRICED_HEADERS = ["cell", "$/hour", "out tok/s", "$ per 1M output tokens", "$ per 1,000 requests"]
CAPACITY_HEADERS = ["server", "task", "mode", "capacity req/s", "$/hour", "$ per 1M output tokens",
                    "$ per 1,000 requests"]
ENERGY_HEADERS = ["cell", "energy J", "J per output token", "J per request", "counter"]


def parts(cost: list[CostRow], capacity: list[CapacityCostRow]) -> list[Part]:
    """The section's paragraphs and tables, in order (the Markdown and the HTML render them)."""
    out: list = []
    priced = [r for r in cost if r.price_per_hour is not None]
    if priced:
        out += [PRICED_NOTE, Table(PRICED_HEADERS, [
            [r.point.label, usd(r.price_per_hour), number(r.output_token_throughput or 0),
             usd_text(r.costs["usd_per_million_output_tokens"]), usd_text(r.costs["usd_per_thousand_requests"])]
            for r in priced])]
    else:
        out.append(UNPRICED_NOTE)
    if capacity:
        out += [CAPACITY_NOTE, Table(CAPACITY_HEADERS, [
            [r.server, r.task, r.mode, number(r.capacity_rps), usd(r.price_per_hour),
             usd(r.costs.get("usd_per_million_output_tokens")), usd(r.costs.get("usd_per_thousand_requests"))]
            for r in capacity])]
    measured = [r for r in cost if r.energy_j is not None]
    if measured:
        out += [ENERGY_NOTE, Table(ENERGY_HEADERS, [
            [r.point.label, number(r.energy_j), None if r.j_per_output_token is None else number(r.j_per_output_token),
             None if r.j_per_request is None else number(r.j_per_request), r.energy_source] for r in measured])]
    else:
        out.append(NOT_AVAILABLE)
    return out


def lines(cost: list[CostRow], capacity: list[CapacityCostRow]) -> list[str]:
    """The section (nothing when the run has no ok cell)."""
    return markdown_section(TITLE, parts(cost, capacity)) if cost else []
