"""The "LLM metrics" tab and the HTML report in a real browser: headless Chromium driven by Playwright.

Chromium is Debian's ``chromium`` package (``scripts/setup_env.sh`` installs it when it
runs as root with apt-get); Playwright's Python package drives it through
``executable_path`` (its own browser download needs the internet). Without either,
the tests are skipped with the reason.

During a real Locust run with the web UI against the mock engine (200 ms to the first
token, 20 ms between tokens; the resource monitor on the mock server), the page is
opened on the tab; once the charts have points, the test checks that every chart is
drawn and that the TTFT p50 shown (the run-so-far table, the last-10-s card and the
chart's last point) is the mock's 200 ms, within 196-212 ms: a sketch's quantile is
within 1 % (about 2 ms), and the loopback and the client's scheduling on this busy
2-core machine add a few ms. The stacked bar of the latency's parts shows the mock's
known schedule from its own per-request timing: prefill its 200 ms (within 199-210 ms:
the mock's event loop can only be late), decode 9 x 20 = 180 ms (178-192 ms), no queue
(no slots: under 2 ms), and the client/network part under 20 ms and not below -1 ms. A
screenshot goes to the test's temporary folder, and to ``docs/figures/webui.png`` when
``LLMLOAD_SCREENSHOT=1`` (the README's figure).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from browser import NEEDS_BROWSER, chromium_page
from locust_helpers import ITL_MS, TTFT_MS, locust_command, write_prompts
from llmload.core.paths import REPO_ROOT
from llmload.core.services import free_port
from test_locust_webui import TTFT_LOW_MS, html_report_run

pytestmark = [pytest.mark.e2e, *NEEDS_BROWSER]
CHARTS_ALWAYS = ("tokens", "ttft", "tpot", "users", "memory")
CHARTS_WHEN_ASKED = ("slo", "goodput", "lag")  # with --slo, and --rate (open loop)
SCREENSHOT = REPO_ROOT / "docs" / "figures" / "webui.png"
#: LLMLOAD_SCREENSHOT=1 also saves the README's figure, from a longer run (about 30 s, so the lines settle).
FOR_README = os.environ.get("LLMLOAD_SCREENSHOT") == "1"
WAIT_S = 45
TOKENS = 10  # --max-tokens with --ignore-eos: the mock's decode is (TOKENS - 1) x ITL_MS
BUSY_TTFT_HIGH_MS = TTFT_MS + 50  # see in_tolerance


@pytest.fixture
def browser_page():
    """A fresh headless Chromium (own profile folder) and one page at 1400x900; page errors are collected."""
    with chromium_page() as page:
        yield page


#: What the page shows, read in the page: the charts' point counts, the table's TTFT p50, the cards, the lines' ends.
READ_PAGE = """() => {
  const charts = {};
  document.querySelectorAll('svg.llmload-chart').forEach(s => { charts[s.dataset.chart] = +s.dataset.points; });
  const th = Array.from(document.querySelectorAll('th')).find(h => h.textContent.trim() === 'TTFT p50 ms');
  let table = null;
  if (th) {
    const index = Array.from(th.parentElement.children).indexOf(th);
    const row = Array.from(th.closest('table').querySelectorAll('tbody tr'))
      .find(r => r.children[0] && r.children[0].textContent.trim() === 'chat');
    table = row ? row.children[index].textContent.trim() : null;
  }
  const cards = {};
  document.querySelectorAll('.llmload-card').forEach(c => { cards[c.dataset.key] = c.dataset.value; });
  const lines = {};
  document.querySelectorAll('path.llmload-line').forEach(p => { lines[p.dataset.series] = p.dataset.last; });
  const parts = {};
  document.querySelectorAll('rect.llmload-part').forEach(r => { parts[r.dataset.part] = +r.dataset.ms; });
  const panel = document.querySelector('.llmload-panel');
  const tableBox = th && th.closest('table').parentElement;
  return {charts, table, cards, lines, parts, underTable: !!(panel && tableBox && tableBox.nextElementSibling === panel),
          stopped: /STOPPED/.test(document.body.innerText)};
}"""


def wait_for(page, ready, timeout_s: float = WAIT_S, proc: subprocess.Popen | None = None) -> dict:
    """What the page shows once ``ready``; fails at once with Locust's output if ``proc`` (the web UI) has ended,
    and after ``timeout_s`` with the page's errors and the start of its text."""
    deadline = time.monotonic() + timeout_s
    shown = {}
    while time.monotonic() < deadline:
        shown = page.evaluate(READ_PAGE)
        if ready(shown):
            return shown
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"Locust ended ({proc.returncode}) before the page got there: {shown}\n"
                                 f"{proc.communicate()[0][-3000:]}")
        page.wait_for_timeout(500)
    text = page.evaluate("() => document.body ? document.body.innerText.slice(0, 300) : ''")
    raise AssertionError(f"the page did not get there in {timeout_s:.0f} s: {shown}; page errors {page.errors}, "
                         f"other problems {page.problems[-10:]}; "
                         f"title {page.title()!r}, text {text!r}")


def in_tolerance(text) -> bool:
    """The TTFT's figure, not another series' (the mock's end to end is 380 ms): this test runs beside the
    parallel part's others (a window's p50 read 212.2 ms once in a CI run on a slow VM); the exact figures within
    a few ms are test_locust_webui.py's, run alone."""
    return text not in (None, "") and TTFT_LOW_MS <= float(text) <= BUSY_TTFT_HIGH_MS


def test_llm_tab_draws_live_charts_in_chromium(mock_server, browser_page, tmp_path):
    url, server_pid = mock_server
    prompts = write_prompts(tmp_path / "chat.jsonl", count=12)
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    # about 13 s: an open loop of 8 requests/s (at most 6 in flight; 12 for the README's figure, so that
    # Poisson bursts do not exhaust the pool) with an SLO, so that every chart is drawn (loose: a request that
    # misses it is a Locust failure, and a busy machine made two miss 500 ms once); the monitor samples
    # the mock server; the web UI quits 4 s after the last request
    pool = "12" if FOR_README else "6"
    cmd = locust_command("chat.py", url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
                         "--autoquit", "4", "-u", pool, "-r", pool, "--rate", "8", "--slo", "ttft=5000,e2e=10000",
                         "--requests", "240" if FOR_README else "100", "-t", "60s", "--max-tokens", str(TOKENS),
                         "--ignore-eos",
                         "--dataset", str(prompts), "--csv", str(tmp_path / "run"), "--monitor-pid", str(server_pid))
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    page = browser_page
    try:
        deadline = time.monotonic() + 30
        while True:  # the web UI is up within a few seconds
            try:
                page.goto(f"{web}/?tab=llm-metrics", wait_until="domcontentloaded", timeout=5000)
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.3)
        shown = wait_for(page, lambda s: all(s["charts"].get(c, 0) >= 4 for c in CHARTS_ALWAYS + CHARTS_WHEN_ASKED)
                         and s["table"] and s["cards"].get("ttft_p50_ms") and s["charts"].get("parts", 0) >= 5,
                         proc=proc)
        assert shown["underTable"], shown  # the panel sits right under Locust's LLM metrics table
        assert set(CHARTS_ALWAYS) <= set(shown["charts"]), shown
        for chart in CHARTS_ALWAYS + CHARTS_WHEN_ASKED:  # each chart is an SVG with a title and its lines
            box = page.locator(f'svg.llmload-chart[data-chart="{chart}"]')
            assert box.count() == 1 and box.locator("text.llmload-chart-title").count() == 1
            assert box.locator("path.llmload-line").count() >= 1
        assert in_tolerance(shown["table"]), shown  # run so far (Locust's table)
        assert in_tolerance(shown["cards"]["ttft_p50_ms"]), shown  # the last 10 s
        assert in_tolerance(shown["lines"]["ttft_p50_ms"]), shown  # the chart's newest point
        assert float(shown["lines"]["output_tokens_per_s"]) > 0 and float(shown["cards"]["server_rss_mib"]) > 0
        assert 0 < float(shown["cards"]["slo_attainment_pct"]) <= 100
        # where the time goes: the mock's own timing of its schedule, the client's residual beside it
        parts = shown["parts"]
        assert set(parts) == {"ttft_residual", "frontend", "queue", "prefill", "decode", "tail"}, shown
        assert TTFT_MS - 1 <= parts["prefill"] <= TTFT_MS + 10 and abs(parts["queue"]) < 2, parts
        # the mock's tokens are due on one timeline from the request's start: a late first token (the machine's
        # load) shortens the decode by as much, so their sum is held to the schedule (which also bounds the decode
        # from below) and the decode alone from above
        service = TTFT_MS + (TOKENS - 1) * ITL_MS
        assert service - 1 <= parts["prefill"] + parts["decode"] <= service + 12, parts
        assert parts["decode"] <= (TOKENS - 1) * ITL_MS + 12, parts
        assert -1 <= parts["ttft_residual"] <= 20 and 0 <= parts["frontend"] < 5, parts  # a busy 2-core machine
        page.locator('svg.llmload-chart[data-chart="ttft"]').hover()  # the axis tooltip, as Locust's charts have
        assert "TTFT p50" in page.locator('[data-chart-box="ttft"] .llmload-tooltip').inner_text()
        page.mouse.move(0, 0)
        page.screenshot(path=str(tmp_path / "webui.png"), full_page=True)
        if FOR_README:
            wait_for(page, lambda s: s["charts"].get("tokens", 0) >= 26 or s["stopped"])
            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        assert (tmp_path / "webui.png").stat().st_size > 10_000
        page.goto(f"{web}/?tab=stats")  # another tab: the panel leaves with the table
        page.wait_for_timeout(500)
        assert page.locator(".llmload-panel").count() == 0
        assert page.errors == [], page.errors
        out, _ = proc.communicate(timeout=40)  # the run ends by --requests, then --autoquit
        assert proc.returncode == 0 and "Traceback" not in out, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_html_report_draws_the_llm_charts_in_chromium(mock_server, browser_page, tmp_path):
    report = html_report_run(mock_server, tmp_path)
    page = browser_page
    page.goto(report.as_uri())
    shown = wait_for(page, lambda s: s["charts"].get("ttft", 0) >= 2 and s["table"], timeout_s=15)
    assert set(CHARTS_ALWAYS) <= set(shown["charts"]) and in_tolerance(shown["table"]), shown
    assert in_tolerance(shown["lines"]["ttft_p50_ms"]), shown
    # the section sits in Locust's report, after its own charts
    assert page.evaluate("document.getElementById('llmload-report').previousElementSibling"
                         ".querySelector('h2').textContent") == "Charts"
    page.locator("#llmload-report").screenshot(path=str(tmp_path / "report.png"))
    assert page.errors == [], page.errors
