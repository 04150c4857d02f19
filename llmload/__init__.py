"""Shared library of the LLM-serving load-testing suite.

Everything that more than one part of the suite uses lives here, once:
prompt records (:mod:`llmload.records`), the SSE parser (:mod:`llmload.sse`),
measured request results and every metric formula (:mod:`llmload.metrics`),
project paths (:mod:`llmload.paths`) and the embedded default model
(:mod:`llmload.model_store`).
"""

__version__ = "0.1.0"
