"""End to end against the real basic server on the embedded model (SmolLM2-135M-Instruct, CPU)."""

from __future__ import annotations

import pytest

from locust_helpers import output, read_stats, run_locust, write_prompts
from llmload.core.metrics import request_metrics
from llmload.core.rawlog import read_results

pytestmark = [pytest.mark.integration, pytest.mark.model]


def test_locustfile_against_the_real_server(real_server, tmp_path):
    locustfile, task, api, mode = "chat.py", "chat", "chat", "stream"
    prompts = write_prompts(tmp_path / f"{task}.jsonl", task, count=2)
    prefix = tmp_path / task
    proc = run_locust(locustfile, real_server, "-u", "1", "-r", "1", "-t", "120s", "--csv", str(prefix),
                      "--requests", "2", "--max-tokens", "8", "--ignore-eos", "--api", api, "--mode", mode,
                      "--dataset", str(prompts), timeout=180)
    log = output(proc)
    assert proc.returncode == 0 and "Traceback" not in log, log[-3000:]
    results = read_results(f"{prefix}_requests.jsonl")
    assert len(results) == 2 and all(r.success for r in results), [r.error for r in results]
    for r in results:  # the model id came from /v1/models; tokens from the server's usage
        assert (r.task, r.api, r.mode) == (task, api, mode)
        assert r.output_tokens == 8 and r.output_tokens_source == "usage" and r.output_chars > 0
        m = request_metrics(r)  # text chunks can be fewer than tokens (a token may decode to no text yet)
        assert 1 <= len(r.token_offsets) <= 8 and 0 < m.ttft <= m.e2e <= r.end_offset
    assert int(read_stats(prefix)[("", "Aggregated")]["Request Count"]) == 2
