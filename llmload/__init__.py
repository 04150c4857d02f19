"""llmload: load-testing OpenAI-compatible LLM servers with Locust.

Layers (docs/architecture.md): :mod:`llmload.core` at the bottom (records, the
wire format and client, the metric catalogue, statistics, the raw log, the run
folder); :mod:`llmload.tasks` (task registry and prompt sets) beside the basic
server and the monitors; :mod:`llmload.targets` (servers under test) and
:mod:`llmload.loadgen` (the Locust integration) on them; :mod:`llmload.runner`
on top.
"""

__version__ = "0.1.0"
