"""The abstract Locust users every locustfile derives from: one task each, ``task_name`` picks the prompts.

    from llmload.loadgen.user import LLMUser

    class ChatUser(LLMUser):
        task_name = "chat"

Closed loop (no ``--rate``): each user sends one request, waits for the whole
answer and sends the next, so ``-u N`` is the number of requests in flight.
Open loop (``--rate R``): each free user takes the next ticket, waits until its
intended start and sends it, so requests go out on the schedule whatever the
server does, and ``-u`` bounds how many are in flight. Requests go out through
the user's ``FastHttpUser`` connection pool and are read by
:mod:`llmload.core.transport` as they arrive; results are counted by the
plugin's sink (:mod:`llmload.loadgen.sink`) in this process. A refused or reset connection makes the user
back off (doubling up to :data:`BACKOFF_MAX_S`) before it tries again. With
``--retry``, a 429 or 503 answer is sent again by the client after its wait
(:mod:`llmload.core.retry`): the user waits (a closed loop's next request waits
with it), the other users go on.

:class:`ConversationUser` plays multi-turn conversations (records with
``turns``): it sends each user turn with the whole history so far, the
assistant turns being the server's own earlier answers.
"""

from __future__ import annotations

import time

import gevent
from locust import FastHttpUser, task

from llmload.core.client import UNREACHABLE, LLMClient
from llmload.core.metrics import RequestResult
from llmload.core.records import DatasetError, PromptRecord
from llmload.core.transport import HTTPTransport
from llmload.loadgen.budget import Ticket
from llmload.loadgen.plugin import plugin_for
from llmload.tasks.generated import conversation_messages

#: Seconds a user waits before it asks again once ``--requests`` is used up (a lost worker's tickets may come
#: back; the run usually stops first).
EXHAUSTED_WAIT_S = 0.5
BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 1.0


class LLMUser(FastHttpUser):
    """Sends the prompts of :attr:`task_name` to an OpenAI-compatible server."""

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
                             worker=self.plugin.node_name, chunk_counter=settings.chunk_counter(),
                             retry=settings.retry_policy)
        self.exhausted = False
        self.backoff = 0.0

    def wait_time(self) -> float:
        """No think time; once the budget is used up, wait a little (Locust stops waiting users at once)."""
        return EXHAUSTED_WAIT_S if self.exhausted else 0.0

    @task
    def generate(self) -> None:
        """Take a ticket, wait until it is due (open loop), send the next prompt and report what came back."""
        ticket = self.plugin.acquire()
        self.exhausted = ticket is None
        if ticket is None:
            # --requests used up. Not StopUser: Locust logs an error for every self-stopped user when the
            # run stops; a waiting user is simply stopped with the others.
            return
        try:
            record = self.plugin.next_prompt(self.task_name, ticket)
        except DatasetError as exc:  # only on a worker: standalone and master check the file at start
            self.plugin.sink.abandoned()
            self.plugin.fail(str(exc))
            self.exhausted = True
            return
        if ticket.intended_start is not None:
            delay = ticket.intended_start - time.time()
            if delay > 0:
                gevent.sleep(delay)
        self.play(record, ticket)

    def play(self, record: PromptRecord, ticket: Ticket) -> None:
        """Send one record and report it (a :class:`ConversationUser` plays several turns)."""
        self.send(record, ticket)

    def send(self, record: PromptRecord, ticket: Ticket, messages: list[dict] | None = None,
             turn: int | None = None) -> RequestResult:
        """One request: look the model up, send, stamp the ticket's fields, report, back off if unreachable."""
        model, error, unreachable = self.plugin.resolve_model(self.llm)
        if model:
            result = self.llm.generate(record, model, messages, cancel=self.plugin.cancel_point(ticket))
        else:
            result = self.llm.failed(record, error, [UNREACHABLE] if unreachable else None)
        result.intended_start, result.warmup, result.turn = ticket.intended_start, ticket.warmup, turn
        # Let every other user read the lines already waiting on its socket before this one does its
        # bookkeeping and sends its next request: a line is stamped when its user reads it, so with many
        # streams ending together the last ones would otherwise be stamped late by the others' work.
        gevent.idle()
        self.plugin.report(result)
        if UNREACHABLE in result.flags:
            self.backoff = min(BACKOFF_MAX_S, self.backoff * 2 if self.backoff else BACKOFF_FIRST_S)
            gevent.sleep(self.backoff)
        else:
            self.backoff = 0.0
        return result


class ConversationUser(LLMUser):
    """Plays each record's ``turns`` in order, each request carrying the history with the server's own answers.

    Every turn is one request (one ticket, one line of the raw log with its
    ``turn`` index). In an open loop the schedule says when conversations
    start; each later turn goes out as soon as the previous answer is complete.
    """

    abstract = True
    needs_chat = True

    def play(self, record: PromptRecord, ticket: Ticket) -> None:
        turns = record.turns or tuple(m["content"] for m in record.messages if m.get("role") == "user")[:1]
        answers: list[str] = []
        for index in range(len(turns)):
            if index:
                follow_up = self.plugin.acquire(scheduled=False)
                if follow_up is None:
                    self.exhausted = True
                    return
                ticket = Ticket(follow_up.index, None, ticket.warmup)
            messages = conversation_messages(turns[:index + 1], answers)
            result = self.send(record, ticket, messages=messages, turn=index)
            if not result.success:
                return  # the conversation cannot go on without the server's answer (nor after a cancel)
            answers.append(result.output_text)
