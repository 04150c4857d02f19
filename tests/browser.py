"""Headless Chromium for the browser tests (the web UI's tab, the HTML reports), driven by Playwright.

Chromium is Debian's ``chromium`` package (``scripts/setup_env.sh`` installs it when it
runs as root with apt-get); Playwright's Python package drives it through
``executable_path`` (its own browser download needs the internet). Without either, a
test marked with :data:`NEEDS_BROWSER` is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from contextlib import contextmanager

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS_BROWSER = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH: install Debian's chromium package "
                       "(scripts/setup_env.sh does it when run as root with apt-get)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                       reason="Playwright's Python package is not installed (pip install -r requirements.txt)"),
]
#: Chromium's flags on a closed network, as root: without the background-networking ones it dials out and waits.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@contextmanager
def chromium_page(width: int = 1400, height: int = 900, **context_options):
    """A fresh headless Chromium (own profile folder) and one page; its page errors are collected in
    ``page.errors``, its console errors and failed requests in ``page.problems`` (for failure messages);
    ``context_options``: Playwright's (``java_script_enabled=False``, ...)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright, tempfile.TemporaryDirectory(prefix="llmload-chromium-") as profile:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height}, **context_options)
        try:
            page = context.new_page()
            page.errors = []
            page.on("pageerror", lambda error: page.errors.append(str(error)))
            page.problems = []
            page.on("console", lambda msg: msg.type == "error" and page.problems.append(f"console: {msg.text}"))
            page.on("requestfailed", lambda req: page.problems.append(f"{req.url}: {req.failure}"))
            yield page
        finally:
            context.close()


def read_offline(path, script: str, **context_options):
    """Open the local page ``path`` with every request beyond its own file blocked, wait (JavaScript on) until
    each plotly chart has drawn, and return (what ``script`` reads in it, the page's errors, the requests it tried
    beyond its file)."""
    with chromium_page(**context_options) as page:
        outside: list[str] = []

        def block(route):
            if route.request.url.startswith("file:"):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", block)
        page.goto(path.as_uri(), wait_until="load")
        if context_options.get("java_script_enabled", True):
            page.wait_for_function("document.querySelectorAll('div.chart svg.main-svg').length >= "
                                   "document.querySelectorAll('div.chart').length", timeout=20_000)
        return page.evaluate(script), page.errors, outside
