"""The Locust load generator: OpenAI-compatible requests measured token by token.

Layers, each usable and testable on its own:

* :mod:`~llmload.core.wire`: the OpenAI wire format (request bodies for the
  completion and chat APIs; SSE and JSON responses interpreted into the raw
  fields of a :class:`llmload.core.metrics.RequestResult`). Pure Python.
* :mod:`~llmload.core.transport`: HTTP over geventhttpclient, reading a
  streamed body line by line the moment each line arrives.
* :mod:`~llmload.core.client`: one request end to end (the two above plus
  time-outs), returning a ``RequestResult`` whatever happens.
* :mod:`~llmload.loadgen.options`: the command-line options.
* :mod:`~llmload.loadgen.plugin`, :mod:`~llmload.loadgen.webui` and
  :mod:`~llmload.loadgen.user`: the Locust integration (stats rows, raw log,
  ``--requests`` budget, distributed mode, monitor, web UI tab, the abstract user).

Only the last three import Locust (which monkey-patches the process with gevent),
so importing this package or the first four modules patches nothing.
"""
