"""Shared library of the LLM-serving load-testing suite.

Everything that more than one part of the suite uses lives here, once:
prompt records (:mod:`llmload.core.records`), the SSE parser (:mod:`llmload.core.sse`),
measured request results and every metric formula (:mod:`llmload.core.metrics`),
project paths (:mod:`llmload.core.paths`) and the embedded default model
(:mod:`llmload.core.model_store`).
"""

__version__ = "0.1.0"
