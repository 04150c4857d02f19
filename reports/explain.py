"""``llmload explain RUN``: where the time of one run's requests went, and which part grew with load.

    llmload explain results/20261202-130000            (or python -m reports.explain RUN)
    llmload explain results/20261202-130000/report/report.json

Reads the run's typed report (its own ``report/report.json`` when current, else
made again from the raw logs, nothing written) and prints, per server, task and
mode, each load level's latency in parts (:mod:`reports.timing`: the mean of each
part in ms with its share of TTFT, or of E2E for sync requests), the residual
beside the client-error bound the run stated, and one sentence naming the part
that grew most from the lowest level to the highest, e.g. ``qa stream: at 32
users vllm's TTFT is 71 % [68, 74] queue (queue grew 120 ms of TTFT's 150 ms
growth from 1 to 32 users)``. A bad path or file: one ``error:`` line, exit 2.
"""

from __future__ import annotations

from pathlib import Path

from llmload.core.cliargs import OneLineParser, print_error
from llmload.core.tables import render
from reports.calibrate import find_calibration
from reports.format import number
from reports.merge import build_report
from reports.report import Report, saved_report
from reports.run import ReportError, load_run
from reports.timing import (NAMES, SplitRow, growth, parts_of, share_text, total_of, untimed_line,
                            untimed_servers)


def read_report(path: Path) -> tuple[Report, str]:
    """The report of ``path`` (a run folder or a saved report.json) and where it came from; :class:`ReportError`
    (one line) when it is neither."""
    if path.is_file():
        report = Report.load(path)
        if report.time_split is None:
            raise ReportError(f"{path}: made before the report split latencies; make it again from its run folder "
                              "(llmload report RUN_DIR)")
        return report, str(path)
    if not path.exists():
        raise ReportError(f"{path}: no such run folder or report file")
    report = saved_report(path)
    if report is not None and report.time_split is not None:
        return report, f"{path / 'report' / 'report.json'}"
    run = load_run(path)
    return build_report(run, use_tokenizer=False, calibration=find_calibration(None, True)), \
        f"{path} (raw logs; nothing written)"


#: What each mode's table shows.
FORMULAS = {"stream": "TTFT = client/network + frontend + queue + prefill, E2E = TTFT + decode + tail; mean ms "
                      "(share of TTFT; decode and tail: of E2E)",
            "sync": "E2E = client/network + frontend + queue + prefill + decode; mean ms (share of E2E)"}


def level_table(rows: list[SplitRow]) -> str:
    """One line per load level: the client's mean, each part's mean ms (share %), the client-error bound and the
    residuals below 0."""
    mode = rows[0].point.mode
    names = [n for n in parts_of(mode) if any(r.part(n) is not None for r in rows)]
    body = []
    for r in rows:
        line = [r.point.level, f"{r.timed}/{r.requests}", None if r.total is None else number(r.total * 1000.0)]
        for name in names:
            p = r.part(name)
            if p is None or p.mean is None:
                line.append(None)
                continue
            of = p.share_ttft if mode == "stream" and p.share_ttft is not None else p.share_e2e
            line.append(f"{number(p.mean * 1000.0)} ({share_text(of).split(' [')[0]})")
        residual = r.residual
        line += [None if r.client_error_ms is None else number(r.client_error_ms),
                 residual.negative if residual else None]
        body.append(line)
    total = total_of(mode).upper()
    headers = (["level", "timed", f"{total} ms"] + [f"{NAMES[n]} ms (%)" for n in names]
               + ["client error ms", "residual < 0"])
    return render(body, headers)


def explanation(report: Report) -> str:
    """The decomposition of every timed point and the growth sentences, as text."""
    rows = report.time_split or []
    out = []
    groups: dict[tuple, list[SplitRow]] = {}
    for r in rows:
        if r.timed:
            p = r.point
            groups.setdefault((p.server, p.task, p.mode, p.phase), []).append(r)
    for (server, task, mode, phase), mine in groups.items():
        out += [f"{server} {task} {mode}" + ("" if phase == "matrix" else f" ({phase})") + ": " + FORMULAS[mode],
                level_table(mine), ""]
    out += [untimed_line(s, rows) for s in untimed_servers(rows)]
    grown = growth(rows)
    if grown:
        out += ([""] if out and out[-1] else []) + [g.sentence() for g in grown] + [""] + [
            f"  {g.high.point.task} {g.high.point.mode}: {g.breakdown()}" for g in grown]
    elif groups:
        out.append("One load level per server: no growth with load to name.")
    if not rows:
        out.append("No cell of the run has successful requests to split.")
    return "\n".join(out).rstrip() + "\n"


def build_parser() -> OneLineParser:
    p = OneLineParser(prog="python -m reports.explain",
                      description="Print where the time of a run's requests went (client/network, the server's "
                                  "frontend, queue, prefill, decode, the tail: means with their share of TTFT) per "
                                  "server and load level, and name the part that grew most with load.")
    p.add_argument("run", type=Path, metavar="RUN",
                   help="a run folder (its report/report.json is read when current, else the raw logs) or a saved "
                        "report.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report, source = read_report(args.run)
    except ReportError as exc:
        return print_error(str(exc))
    except OSError as exc:
        return print_error(f"{exc.filename or args.run}: {exc.strerror or exc}")
    print(f"Where the time goes: {report.run.name} (from {source})\n")
    print(explanation(report), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
