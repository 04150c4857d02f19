"""The web UI: the "LLM metrics" tab (declared in the page, filled from the stats poll) and the download routes."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

from locust_helpers import locust_command, write_prompts
from llmload.core.paths import REPO_ROOT
from llmload.core.services import free_port

REQUESTS = 8


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read()


def test_llm_metrics_tab_shows_live_exact_figures(mock_server, tmp_path):
    url, _ = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl")
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    cmd = locust_command("chat.py", url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                         "--autoquit", "2", "-u", "2", "-r", "2", "--requests", str(REQUESTS), "--max-tokens", "10",
                         "--ignore-eos", "--dataset", str(prompts))
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        rows = []
        while time.monotonic() < deadline:
            try:
                stats = json.loads(get(f"{web}/stats/requests"))
            except OSError:
                time.sleep(0.3)
                continue
            tabs = {tab["key"]: tab["data"] for tab in stats.get("extended_stats", [])}
            rows = tabs.get("llm-metrics", [])
            if rows and rows[0]["requests"] == REQUESTS and stats["state"] == "stopped":
                break
            time.sleep(0.3)
        assert rows and rows[0]["task"] == "chat" and rows[0]["requests"] == REQUESTS, rows
        row = rows[0]
        assert 195 <= float(row["ttftp50"]) <= 300 and 15 <= float(row["tpotmean"]) <= 30
        assert float(row["outputtokenthroughput"]) > 0 and float(row["requestthroughput"]) > 0
        # the Aggregated row that the charts plot counts requests only, not the METRIC rows
        total = next(s for s in stats["stats"] if s["name"] == "Aggregated")
        assert total["num_requests"] == REQUESTS
        assert {s["name"] for s in stats["stats"] if s["method"] == "METRIC"} == {"chat TTFT", "chat TPOT"}

        page = get(f"{web}/").decode()
        assert "LLM metrics" in page and "ttftp50" in page  # the tab and its table are declared
        raw = get(f"{web}/llmload/requests.jsonl").decode().splitlines()
        assert len(raw) == REQUESTS and all(json.loads(line)["success"] for line in raw)
        summary = get(f"{web}/llmload/summary.csv").decode().splitlines()
        assert summary[0].startswith("task,requests,failures") and summary[1].startswith(f"chat,{REQUESTS},0")
        out, _ = proc.communicate(timeout=30)  # --autoquit ends it
        assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
