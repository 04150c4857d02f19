"""Where the time goes in a bare Locust run: the mock's known queue and prefill, recovered from its own timing.

The mock engine with 2 slots, 60 ms to the first token and 10 ms between tokens
serves 6 users asking for 5 tokens each: a slot is held for S = 60 + 4 x 10 = 100
ms, and once the loop runs 4 requests wait for the 2 slots, each about 2 S (less
the few ms between a user's answer and its next request). Its schedule is
known: prefill 60 ms, decode 40 ms, queue about 2 S. Against it, with medians
(a stall of this shared 2-core machine shifts a few requests: the mock stamps a
stage when its event loop reaches it, and a late loop moves time from prefill
to queue):

* the server's own timing (its ``metrics`` object, in every response) gives the
  prefill and the decode within the run's client-error bound (its
  ``_summary.json``) plus the mock's event-loop lateness (:data:`LOOP_MS`);
* the queue the client can infer on its own clock (its TTFT less the known
  prefill and the server's frontend) is the server's queue within the bound plus
  the loopback's network (:data:`NETWORK_MS`);
* the client's TTFT splits into the parts with a residual (network and client)
  between minus the bound and the bound plus the network.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmload.core.metrics import request_metrics, summarize
from llmload.core.rawlog import read_results
from llmload.core.services import free_port
from llmload.targets.basic import basic_server_command
from locust_helpers import output, run_locust, serving, write_prompts

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # queue and prefill within a few ms of the schedule

SLOTS, TTFT_MS, ITL_MS, TOKENS, USERS, REQUESTS = 2, 60.0, 10.0, 5, 6, 36
SERVICE_MS = TTFT_MS + (TOKENS - 1) * ITL_MS
#: The mock's own lateness: it stamps "scheduled" and each token when its event loop wakes, after the due time.
LOOP_MS = 5.0
#: The loopback's share of the residual: the request in, the first chunk out, HTTP parsing on both sides.
NETWORK_MS = 3.0
#: Between a user's answer and its next request reaching the engine (its wait is 2 S less that).
TURNAROUND_MS = 15.0


def test_the_server_timing_recovers_the_mocks_queue_and_prefill(tmp_path):
    port = free_port()
    cmd = basic_server_command("mock", port, extra=["--mock-ttft-ms", f"{TTFT_MS:g}", "--mock-itl-ms", f"{ITL_MS:g}",
                                                    "--mock-slots", str(SLOTS), "--log-level", "warning"])
    prompts = write_prompts(tmp_path / "chat.jsonl", count=REQUESTS)
    prefix = tmp_path / "run"
    with serving("mock with slots", cmd, port, tmp_path / "server.log"):
        proc = run_locust("chat.py", f"http://127.0.0.1:{port}", "-u", str(USERS), "-r", str(USERS), "-t", "60s",
                          "--requests", str(REQUESTS), "--max-tokens", str(TOKENS), "--ignore-eos", "--mode",
                          "stream", "--dataset", str(prompts), "--csv", str(prefix))
    assert proc.returncode == 0, output(proc)[-3000:]
    results = sorted(read_results(f"{prefix}_requests.jsonl"), key=lambda r: r.start_time)
    assert len(results) == REQUESTS and all(r.success for r in results)
    assert all(r.server_timing and "server_timing_malformed" not in r.flags for r in results)  # every one timed
    bound_ms = json.loads(Path(f"{prefix}_summary.json").read_text())["client_error"]["bound_ms"]
    metrics = [request_metrics(r) for r in results]

    def ms(name: str) -> np.ndarray:
        return np.array([getattr(m, name) for m in metrics]) * 1000.0

    queue, prefill, decode, residual, frontend, ttft = (ms(n) for n in ("queue", "prefill", "decode",
                                                                        "ttft_residual", "frontend", "ttft"))
    inferred = ttft - TTFT_MS - frontend  # the wait as the client sees it, on its own clock
    print(f"\nMEASURED queue median {np.median(queue):.1f} ms (schedule about {2 * SERVICE_MS:.0f} less the turnaround"
          f"), client's inferred queue median {np.median(inferred):.1f}; prefill median {np.median(prefill):.2f} ms, "
          f"decode median {np.median(decode):.2f}; residual median {np.median(residual):.2f} ms, mean "
          f"{residual.mean():.2f}, min {residual.min():.2f}; client-error bound {bound_ms:.2f} ms")
    late = bound_ms + LOOP_MS
    assert TTFT_MS - 1.0 <= np.median(prefill) <= TTFT_MS + late, prefill
    assert abs(np.median(decode) - (TOKENS - 1) * ITL_MS) <= late, decode
    assert 2 * SERVICE_MS - TURNAROUND_MS <= np.median(queue) <= 2 * SERVICE_MS + late, queue
    assert abs(np.median(queue - inferred)) <= bound_ms + NETWORK_MS + late, queue - inferred
    # the client's TTFT splits into its parts: the residual is the network and the client
    assert -bound_ms <= np.median(residual) <= bound_ms + NETWORK_MS and residual.mean() >= -bound_ms, residual
    summary = summarize(results)
    assert summary.get("ttft", "mean") == pytest.approx(
        sum(summary.get(name, "mean") for name in ("ttft_residual", "frontend", "queue", "prefill")), abs=1e-9)
    # the live figures (the summary JSON) hold the same parts: exact means
    live = json.loads(Path(f"{prefix}_summary.json").read_text())["summary"]
    for name in ("queue_mean", "prefill_mean", "ttft_residual_mean"):
        assert live[name] == pytest.approx(summary.flat()[name], rel=1e-9), name
