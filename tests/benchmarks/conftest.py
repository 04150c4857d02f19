"""The benchmarks measure Locust's CPU from outside, by its PID (the monitor's client, ``os.wait4``): they start it
cold, not through the tests' warm Locust (docs/testing.md, "Warm Locust"), where that PID is the client's."""

import pytest


@pytest.fixture(autouse=True)
def cold_locust(monkeypatch):
    monkeypatch.delenv("LLMLOAD_WARM_LOCUST", raising=False)
