"""Request limits: a header read timeout (uvicorn protocol), a body read timeout and a body-size limit (ASGI).

* :func:`header_timeout_protocol` closes a connection that has not sent
  complete request headers within ``header_timeout_s``, counted from the
  connection or from the end of the previous answer on a kept-alive one.
* :class:`RequestLimits` reads each request body before the app sees it: a body
  larger than ``max_body_bytes`` gets 413 (from ``Content-Length`` before
  anything is read, or by counting a chunked body, never buffering more than the
  limit), one that has not arrived within ``body_timeout_s`` gets 408 and the
  connection is closed. Both answers are OpenAI-shaped errors.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import error_response

log = logging.getLogger("server")


# --------------------------------------------------------------------------- header read timeout

# uvicorn has no header timeout (its keep-alive timer is cancelled by every byte received, and an ASGI
# guard runs only once the headers are complete: Kludex/uvicorn#157), so the guard sits in the HTTP
# protocol itself: a subclass of the protocol uvicorn would pick that arms a timer whenever it waits for
# a request's headers and disarms it when the headers are complete, which is when the protocol creates
# the request's ``cycle``. Both of uvicorn's HTTP/1.1 protocols (httptools, h11) keep that attribute.


class _HeaderTimeoutMixin:
    header_timeout_s: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None
    _waiting_cycle: object = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is not None and self.cycle is not self._waiting_cycle:
            self._disarm_header_timer()  # a request's headers are complete

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_timer()  # kept alive: the next request's headers are due

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._waiting_cycle = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.cycle is self._waiting_cycle and not self.transport.is_closing():
            log.info("closed a connection from %s that sent no complete request headers within %gs",
                     "%s:%d" % self.client if self.client else "?", self.header_timeout_s)
            self.transport.close()


def header_timeout_protocol(header_timeout_s: float, base: type | None = None) -> type:
    """uvicorn's HTTP protocol class (``base``, default: the one ``http="auto"`` picks) with the header timeout.

    Pass it as ``uvicorn.run(app, http=...)``.
    """
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol as base
    return type(f"HeaderTimeout{base.__name__}", (_HeaderTimeoutMixin, base), {"header_timeout_s": header_timeout_s})


# --------------------------------------------------------------------------- body read timeout and size limit


class _BodyTooLarge(Exception):
    pass


class _ClientGone(Exception):
    pass


class RequestLimits:
    """ASGI middleware: read the request body within ``body_timeout_s`` and ``max_body_bytes`` (0 = no limit).

    The app then gets the whole body as one message. A 413 leaves the connection
    open: the server reads and drops the rest of the body, so that the client can
    finish sending and read the answer (closing at once would reset the
    connection under a client still sending). A 408 closes the connection.
    """

    def __init__(self, app: ASGIApp, max_body_bytes: int = 0, body_timeout_s: float = 0.0):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if self.max_body_bytes and declared and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.body_timeout_s or None):
                body = await self._read_body(receive)
        except TimeoutError:
            response = error_response(408, f"The request body did not arrive within {self.body_timeout_s:g} s "
                                           "(--body-timeout-s).", code="request_timeout",
                                      headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        except _BodyTooLarge:
            await self._too_large(scope, receive, send)
            return
        except _ClientGone:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive) -> bytes:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if self.max_body_bytes and size > self.max_body_bytes:
                raise _BodyTooLarge()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A client that waits for "100 Continue" never sends the body: close rather than read its next request as one.
        waiting = Headers(scope=scope).get("expect", "").lower() == "100-continue"
        response = error_response(413, f"The request body is larger than this server's limit of "
                                       f"{self.max_body_bytes} bytes (--max-body-bytes).", code="request_too_large",
                                  headers={"Connection": "close"} if waiting else None)
        await response(scope, receive, send)
