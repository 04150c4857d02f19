"""The resource monitor of a run (``--monitor-pid``): started with the test where the run is led, stopped with it."""

from __future__ import annotations

import logging

log = logging.getLogger("llmload")


class ResourceMonitor:
    """Samples host, client and server resources into ``<prefix>_monitor.csv`` while a test runs."""

    def __init__(self):
        self._sampler = None

    @property
    def running(self) -> bool:
        return self._sampler is not None

    def start(self, settings) -> None:
        if settings.monitor_pid is None or self._sampler is not None:
            return
        try:
            from monitors.sampler import start_monitor  # psutil and a subprocess: only with --monitor-pid
        except ImportError as exc:
            log.error(f"llmload: --monitor-pid given but the resource monitor is not available ({exc}); "
                      "running without it")
            return
        kwargs = {"metrics_url": settings.metrics_url} if settings.metrics_url else {}
        try:
            self._sampler = start_monitor(str(settings.monitor_path), server_pid=settings.monitor_pid or None,
                                          interval=settings.monitor_interval, **kwargs)
        except Exception as exc:  # the load test goes on without resource figures
            log.error(f"llmload: cannot start the resource monitor: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop()
