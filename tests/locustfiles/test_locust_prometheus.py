"""--prometheus-port: /metrics scraped during real Locust runs against the mock, then checked against the summary.

Standalone and distributed (the master serves the merged figures of two
workers). The run keeps its web UI up for a few seconds after ``--requests``
(``--autostart --autoquit``), as a master watched by Prometheus does, so the
last scrape sees the final figures. Counts must equal the summary's; the
summary's latency quantiles (sketches, within 1 %) must fall in the histogram
bucket that holds that quantile's rank.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmload.core.metrics import summarize
from llmload.core.paths import REPO_ROOT
from llmload.core.rawlog import read_results
from llmload.core.services import free_port
from locust_helpers import locust_command, output, run_locust, write_prompts

pytestmark = pytest.mark.integration

REQUESTS = 80
SCRAPE_EVERY_S = 0.15
RUN_LIMIT_S = 120.0


def scrape(port: int) -> dict[str, list] | None:
    """Samples by name, ``[(labels, value)]``; None when /metrics does not answer (yet, or any more)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def total(samples: dict, name: str) -> float:
    return sum(v for _labels, v in samples.get(name, []))


def watch(port: int, summary: Path, procs: list[subprocess.Popen]) -> tuple[list[float], dict]:
    """Scrape until the summary is written, then once more: the request counts seen, and the last scrape."""
    seen: list[float] = []
    deadline = time.monotonic() + RUN_LIMIT_S
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        samples = scrape(port)
        if samples is not None:
            seen.append(total(samples, "llmload_requests_total"))
        if summary.is_file():
            time.sleep(0.5)  # the summary is written as the run stops: the figures are final already
            final = scrape(port)
            assert final is not None, "no /metrics after the run"
            return seen, final
        time.sleep(SCRAPE_EVERY_S)
    raise AssertionError(f"no summary within {RUN_LIMIT_S:.0f} s; processes: {[p.poll() for p in procs]}")


def quantile_bucket(buckets: list[tuple[float, float]], q: float) -> tuple[float, float]:
    """``(lower, upper)`` edges of the bucket holding the value at rank ``q * (n - 1)`` (as the sketch ranks)."""
    count = buckets[-1][1]
    rank = int(q * (count - 1))
    lower = 0.0
    for le, cumulative in buckets:
        if cumulative > rank:
            return lower, le
        lower = le
    raise AssertionError("empty histogram")


def check_against_summary(final: dict, prefix: Path) -> dict:
    """The last scrape's figures equal ``<prefix>_summary.json``'s (counts), or agree within a bucket (quantiles)."""
    data = json.loads(Path(f"{prefix}_summary.json").read_text())
    s = data["summary"]
    run = data["run"]
    assert run and {labels["run"] for labels, _v in final["llmload_requests_total"]} == {run}
    assert total(final, "llmload_requests_total") == s["requests"] == REQUESTS
    assert total(final, "llmload_failures_total") == s["failures"] == 0
    assert total(final, "llmload_output_tokens_total") == s["total_output_tokens"]
    assert total(final, "llmload_slo_met_total") == round(s["slo_attainment"] / 100 * s["requests"])
    assert total(final, "llmload_slo_attainment_ratio") == pytest.approx(s["slo_attainment"] / 100, rel=1e-9)
    assert total(final, "llmload_goodput_requests_per_second") == pytest.approx(s["goodput"], rel=1e-9)
    for name, stats in (("ttft", ("p50", "p90", "p99")), ("tpot", ("p50", "p90")), ("e2e", ("p50", "p90"))):
        buckets = [(float(labels["le"]), v) for labels, v in final[f"llmload_{name}_seconds_bucket"]]
        assert buckets[-1][1] == total(final, f"llmload_{name}_seconds_count") == s["requests"] - s["failures"]
        for stat in stats:
            lower, upper = quantile_bucket(buckets, float(stat[1:]) / 100)
            assert lower / 1.011 <= s[f"{name}_{stat}"] <= upper * 1.011, (name, stat, lower, upper, s[f"{name}_{stat}"])
    exact = summarize(read_results(f"{prefix}_requests.jsonl"))  # ITL: every gap, in the raw log only
    gaps = total(final, "llmload_itl_seconds_count")
    assert gaps == sum(len(r.token_offsets) - 1 for r in read_results(f"{prefix}_requests.jsonl"))
    assert total(final, "llmload_itl_seconds_sum") / gaps == pytest.approx(exact.get("itl", "mean"), rel=1e-6)
    bounds = {labels["worker"]: v for labels, v in final["llmload_client_error_bound_seconds"]}
    assert data["client_error"]["bound_ms"] == pytest.approx(max(bounds.values()) * 1000, abs=2e-3)
    return data


def ui_args() -> list[str]:
    """Keep the web UI (and /metrics) up for a while after --requests, as a watched master does."""
    return ["--autostart", "--autoquit", "8", "--web-host", "127.0.0.1", "--web-port", str(free_port())]


def run_args(prompts: Path, prefix: Path, port: int, max_tokens: int = 12) -> list[str]:
    return ["-u", "4", "-r", "4", "-t", "90s", "--requests", str(REQUESTS), "--max-tokens", str(max_tokens),
            "--ignore-eos",
            "--model", "mock", "--dataset", str(prompts), "--csv", str(prefix), "--slo", "ttft=5000,tpot=500",
            "--prometheus-port", str(port), "--prometheus-host", "127.0.0.1"]


def finish(procs: list[subprocess.Popen]) -> list[str]:
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=60)[0])
        finally:
            if p.poll() is None:
                p.kill()
    return logs


def watched(port: int, summary: Path, procs: list[subprocess.Popen]) -> tuple[list[float], dict, list[str]]:
    """:func:`watch`, then :func:`finish`: the counts seen, the last scrape, each process's output (shown, the
    last lines of each, when the watch fails)."""
    try:
        seen, final = watch(port, summary, procs)
    except AssertionError as failure:
        logs = finish(procs)
        tails = "\n".join(f"--- process {i} (exit {p.returncode}):\n{log[-2500:]}"
                          for i, (p, log) in enumerate(zip(procs, logs)))
        raise AssertionError(f"{failure}\n{tails}") from None
    except BaseException:
        finish(procs)
        raise
    return seen, final, finish(procs)


@pytest.mark.slow
def test_standalone_metrics_agree_with_the_summary(fast_mock, tmp_path):
    prompts, prefix, port = write_prompts(tmp_path / "chat.jsonl"), tmp_path / "solo", free_port()
    proc = subprocess.Popen(locust_command("chat.py", fast_mock, *ui_args(), *run_args(prompts, prefix, port)),
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, final, (log,) = watched(port, Path(f"{prefix}_summary.json"), [proc])
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    assert seen == sorted(seen) and any(0 < n < REQUESTS for n in seen), seen  # scraped while it ran
    data = check_against_summary(final, prefix)
    assert {labels["worker"] for labels, _v in final["llmload_client_error_bound_seconds"]} == {"local"}
    assert "workers" not in data["client_error"]


@pytest.mark.slow
def test_the_master_serves_the_merged_figures_of_its_workers(fast_mock, tmp_path):
    prompts, prefix, port, master_port = write_prompts(tmp_path / "chat.jsonl"), tmp_path / "dist", free_port(), \
        free_port()
    workers = [subprocess.Popen(locust_command("chat.py", fast_mock, "--worker", "--master-host", "127.0.0.1",
                                               "--master-port", str(master_port)),
                                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for _ in range(2)]
    master = subprocess.Popen(locust_command("chat.py", fast_mock, "--master", "--expect-workers", "2",
                                             "--master-bind-host", "127.0.0.1", "--master-bind-port",
                                             str(master_port), *ui_args(),
                                             # about 5 s: longer than a worker's report interval (3 s), so that
                                             # a scrape sees the run part done (2 s of requests once saw none)
                                             *run_args(prompts, prefix, port, max_tokens=40)),
                              cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs = [master, *workers]
    seen, final, logs = watched(port, Path(f"{prefix}_summary.json"), procs)
    assert master.returncode == 0 and "Traceback" not in "".join(logs), logs[0][-3000:]
    assert seen == sorted(seen) and any(0 < n < REQUESTS for n in seen), seen
    data = check_against_summary(final, prefix)
    workers = data["client_error"]["workers"]
    assert len(workers) == 2 and {labels["worker"] for labels, _v in final["llmload_client_cpu_ratio"]} == \
        {w["worker"] for w in workers}
    # a bound needs loop samples, taken only while a request is in flight: a worker of a fast run may have none
    bounds = {labels["worker"]: v for labels, v in final["llmload_client_error_bound_seconds"]}
    assert set(bounds) == {w["worker"] for w in workers if w["samples"]} and bounds
    assert data["client_error"]["worst_worker"] == max(bounds, key=bounds.get)
    # every request in the master's raw log is from a worker it names (on a busy machine one worker may start its
    # users late and find the budget's tickets all taken by the other: --requests is shared, not split)
    sent = {r.worker for r in read_results(f"{prefix}_requests.jsonl")}
    assert sent and sent <= {w["worker"] for w in workers}, (sent, workers)


def test_a_metrics_port_in_use_is_one_line_and_exit_code_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_locust("chat.py", "http://127.0.0.1:9", "--requests", "1", "--model", "mock", "--dataset",
                          str(write_prompts(tmp_path / "p.jsonl")), "--prometheus-port", str(port),
                          "--prometheus-host", "127.0.0.1")
    lines = output(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: --prometheus-port {port}: cannot serve /metrics on 127.0.0.1:{port}: "), lines


@pytest.mark.parametrize("args, message", [
    (["--prometheus-port", "70000"], "error: argument --prometheus-port: '70000' is not a port (1 to 65535)"),
    (["--prometheus-host", "127.0.0.1"], "error: --prometheus-host is where /metrics binds: give --prometheus-port"),
])
def test_bad_export_options_are_one_line(args, message):
    proc = run_locust("chat.py", "http://127.0.0.1:9", *args)
    lines = output(proc).strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), lines
