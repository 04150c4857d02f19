"""A server that is already running at a URL: reached, never started nor stopped by the suite."""

from __future__ import annotations

from llmload.targets.base import TargetKind, TargetSettings


class ExternalServer(TargetKind):
    """Any OpenAI-compatible server given as ``NAME=http://host:port``."""

    name = "url"
    description = "a server already running at a URL (NAME=http://host:port)"
    needs_model = False
    external = True

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        raise NotImplementedError("an external server is not started by the suite")
