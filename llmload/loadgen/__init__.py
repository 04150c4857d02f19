"""The Locust load generator: OpenAI-compatible requests measured token by token.

Layers, each usable and testable on its own:

* :mod:`~llmload.core.apis` and :mod:`~llmload.core.wire`: the wire format
  (one handler per API style: completion, chat, Responses; SSE and JSON
  responses interpreted into the raw fields of a
  :class:`llmload.core.metrics.RequestResult`). Pure Python.
* :mod:`~llmload.core.transport`: HTTP over geventhttpclient, reading a
  streamed body as the socket delivers it, each read stamped when it returns.
* :mod:`~llmload.core.client`: one request end to end (the two above plus
  time-outs), returning a ``RequestResult`` whatever happens.
* :mod:`~llmload.loadgen.options`: the command-line options.
* the parts of a run, without Locust: tickets (:mod:`~llmload.loadgen.budget`,
  :mod:`~llmload.loadgen.schedule`), the results sink
  (:mod:`~llmload.loadgen.sink`), the live aggregates
  (:mod:`~llmload.loadgen.live`), the distributed protocol
  (:mod:`~llmload.loadgen.cluster`), outputs (:mod:`~llmload.loadgen.outputs`),
  what a run says (:mod:`~llmload.loadgen.watch`), the resource monitor
  (:mod:`~llmload.loadgen.monitor`);
* the Locust integration: :mod:`~llmload.loadgen.plugin` (the run's
  lifecycle), :mod:`~llmload.loadgen.master` and :mod:`~llmload.loadgen.worker`
  (distributed mode), :mod:`~llmload.loadgen.rows` (Locust's stats rows),
  :mod:`~llmload.loadgen.user` (the abstract users), :mod:`~llmload.loadgen.webui`
  (the web UI tab), :mod:`~llmload.loadgen.shapes` (load shapes).

Only the Locust integration imports Locust (which monkey-patches the process
with gevent), so importing this package or the other modules patches nothing.
"""
