"""The abstract Locust user every locustfile derives from: one task, ``task_name``, picks the prompts.

    from llmload.loadgen.user import LLMUser

    class ChatUser(LLMUser):
        task_name = "chat"

Each user is a closed loop: it sends one request, waits for the whole answer,
and sends the next (no think time), so ``-u N`` is the number of requests in
flight. The request goes out through the user's ``FastHttpUser`` connection
pool but is read by :mod:`llmload.core.transport` line by line, and it is
reported by :mod:`llmload.loadgen.plugin` (true E2E, TTFT and TPOT rows, raw log).
"""

from __future__ import annotations

import logging

import gevent
from locust import FastHttpUser, task

from llmload.core.client import LLMClient
from llmload.core.records import DatasetError
from llmload.loadgen.plugin import plugin_for
from llmload.core.transport import HTTPTransport

log = logging.getLogger("llmload")

#: Seconds an idle user waits once ``--requests`` is used up (the run stops long before).
IDLE_WAIT_S = 3600.0


class LLMUser(FastHttpUser):
    """Sends the prompts of :attr:`task_name` to an OpenAI-compatible server, one request at a time."""

    abstract = True
    #: The task whose prompt file (``datasets/data/<task_name>.jsonl`` unless ``--dataset``) is sent.
    task_name: str = ""

    def __init__(self, environment):
        self.plugin = plugin_for(environment)
        settings = self.plugin.settings
        # FastHttpUser reads these when it builds its session: a request may take --timeout in all.
        self.network_timeout = self.connection_timeout = settings.timeout
        super().__init__(environment)
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        transport = HTTPTransport(self.host, self.client.client.clientpool, headers)
        self.llm = LLMClient(transport, settings.params, self.task_name, timeout=settings.timeout,
                             worker=self.plugin.node_name)
        self.exhausted = False

    def wait_time(self) -> float:
        """No think time; once the budget is used up, wait (Locust stops waiting users at once)."""
        return IDLE_WAIT_S if self.exhausted else 0.0

    @task
    def generate(self) -> None:
        """Send the next prompt and report what came back (failures included)."""
        if not self.plugin.acquire():
            # --requests used up. Not StopUser: Locust logs an error for every self-stopped user when the
            # run stops; a waiting user is simply stopped with the others.
            self.exhausted = True
            return
        try:
            record = self.plugin.next_prompt(self.task_name)
        except DatasetError as exc:  # only on a worker: standalone and master check the file at start
            log.error(f"llmload: {exc}")
            self.exhausted = True
            return
        model, error = self.plugin.resolve_model(self.llm)
        result = self.llm.generate(record, model) if model else self.llm.failed(record, error)
        # Let every other user read the lines already waiting on its socket before this one does its
        # bookkeeping and sends its next request: a line is stamped when its user reads it, so with many
        # streams ending together the last ones would otherwise be stamped late by the others' work.
        gevent.idle()
        self.plugin.report(result, context=self.context(), url=self.llm.transport.url(self.llm.params.path))
