"""HTTP transport over geventhttpclient: a streamed body read as the socket delivers it.

Locust's ``FastHttpUser`` streams with ``iter_content``/``iter_lines``, which wait
for about 1 KiB before returning anything, so small SSE events arrive late
(measured in docs/loadgen.md). This transport hands the caller each piece of
the body the moment one socket read returns it (:meth:`LineResponse.reads`:
whatever the server has sent so far, up to :data:`READ_SIZE` bytes, HTTP
chunked framing removed), stamped once with ``time.perf_counter()`` right after
that read, and sends ``Accept-Encoding: identity`` so that no compression layer
buffers the body either. Lines that came in one read arrived together and
share its stamp: the work of reading the first does not delay the others'.

The connection pool is the user's own (the ``FastHttpSession``'s), so
keep-alive connections are reused between requests; a response abandoned half
read (an error or a time-out) has its socket closed rather than handed back
to the pool with unread bytes on it.
"""

from __future__ import annotations

import errno
import socket
import time
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit

import gevent
from geventhttpclient._parser import HTTPParseError
from geventhttpclient.client import HTTPClientPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse
from geventhttpclient.url import URL

#: Bytes asked of the socket per read: a client that falls behind takes what has piled up in few reads.
READ_SIZE = 64 * 1024

#: Headers every request sends: no compression (it would buffer the stream) and JSON in.
BASE_HEADERS = {"Accept-Encoding": "identity", "Content-Type": "application/json"}


class TransportError(ConnectionError):
    """The request could not be sent or its response not read; the message is one line.

    ``unreachable`` is True when the server refused or reset the connection (nobody
    listening, or it went away): the load generator backs off and counts the outage.
    """

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


def is_unreachable(exc: BaseException) -> bool:
    """A refused or reset connection: the server is not there (as opposed to a slow or broken answer)."""
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError)) or getattr(exc, "errno", None) in (
        errno.ECONNREFUSED, errno.ECONNRESET)


def transport_error(exc: BaseException, url: str) -> TransportError:
    """The :class:`TransportError` for a socket/HTTP exception raised while talking to ``url``."""
    return TransportError(describe_error(exc, url), unreachable=is_unreachable(exc))


def describe_error(exc: BaseException, url: str) -> str:
    """A one-line, human message for a socket/HTTP exception raised while talking to ``url``."""
    where = urlsplit(url).netloc or url
    if isinstance(exc, ConnectionRefusedError) or getattr(exc, "errno", None) == errno.ECONNREFUSED:
        return f"connection refused by {where} (is the server running?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host {where}: {exc.strerror or exc}"
    if isinstance(exc, (socket.timeout, TimeoutError, gevent.Timeout)):
        return f"network time-out talking to {where}"
    if isinstance(exc, ConnectionResetError):
        return f"connection reset by {where}"
    if isinstance(exc, HTTPConnectionClosed) or (isinstance(exc, HTTPParseError)
                                                 and "incomplete" in str(exc).lower()):
        return f"connection closed by {where} before the response ended"
    if isinstance(exc, HTTPParseError):
        return f"invalid HTTP response from {where}: {exc}"
    return f"{type(exc).__name__} talking to {where}: {exc}"


class LineResponse:
    """An HTTP response whose body is read by the caller, piece by piece as it arrives or whole."""

    def __init__(self, raw: HTTPSocketPoolResponse, url: str):
        self._headers_at = time.perf_counter()  # body bytes that came with the headers arrived now
        self._raw = raw
        self._sock = raw._sock  # kept to close it if the body is abandoned (see discard)
        self.url = url
        self.status_code: int = raw.status_code
        self.content_type: str = str(raw.get("content-type", "") or "")
        self.retry_after: str = str(raw.get("retry-after", "") or "")  # a 429 or 503 says when to retry

    def reads(self) -> Iterator[tuple[bytes, float]]:
        """Each piece of the body as one socket read delivered it, and the ``perf_counter`` time of that read.

        Pieces are cut wherever the network cut them (a line may end in the next
        one). Raises :class:`TransportError` when the connection fails or times
        out mid-body.
        """
        raw = self._raw
        # geventhttpclient's parser appends the decoded body to this buffer as its feed() parses the bytes
        # read; its public readline() would return one line at a time, each line costing a call and a stamp.
        body = raw._body_buffer
        arrived = self._headers_at
        with self._reading():
            while True:
                if body:
                    piece = bytes(body)
                    del body[:]
                    yield piece, arrived
                if raw.message_complete:
                    return
                sock = raw._sock
                if sock is None:
                    raise HTTPConnectionClosed("connection closed.")
                data = sock.recv(READ_SIZE)
                arrived = time.perf_counter()
                raw.feed(data)  # at the end of the body it hands the connection back to the pool
                if not data and not raw.message_complete:
                    raise HTTPConnectionClosed("connection closed.")

    def read(self) -> tuple[bytes, float]:
        """The whole body and the ``perf_counter`` time its last byte was read."""
        with self._reading():
            body = self._raw.read()
        return body, time.perf_counter()

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Drop the connection on a time-out or a failed read; a read failure becomes TransportError."""
        try:
            yield
        except gevent.Timeout:
            self.discard()
            raise
        except (OSError, HTTPParseError) as exc:
            self.discard()
            raise transport_error(exc, self.url) from None

    @property
    def complete(self) -> bool:
        """True once the whole body has been read (the connection then went back to the pool)."""
        return bool(self._raw.message_complete)

    def discard(self) -> None:
        """Give up on the body: close the socket so that no later request reads its leftovers."""
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()  # the pool drops closed sockets when they are next taken
            except OSError:
                pass
        self._raw.release()

    def close(self) -> None:
        """Finish with the response: a fully read one keeps its connection alive, others are discarded."""
        if self.complete:
            self._raw.release()
            self._sock = None
        else:
            self.discard()


class HTTPTransport:
    """Sends requests to one base URL through a geventhttpclient client pool."""

    def __init__(self, base_url: str, client_pool: HTTPClientPool, headers: dict | None = None):
        self.base_url = base_url.rstrip("/")
        self.client_pool = client_pool
        self.headers = {**BASE_HEADERS, **(headers or {})}
        self._url = URL(self.base_url + "/")

    def url(self, path: str) -> str:
        return self.base_url + path

    def request_headers(self, accept: str = "application/json", extra: dict | None = None) -> dict:
        """Every header of one request: the transport's own, ``Accept``, and ``extra`` (a request's identity)."""
        return {**self.headers, "Accept": accept, **(extra or {})}

    def send(self, method: str, path: str, body: bytes | None = None, accept: str = "application/json",
             headers: dict | None = None) -> LineResponse:
        """Send one request and read its status line and headers; the body is left to the caller.

        ``headers``: every header to send, made beforehand by :meth:`request_headers` (off the timed path);
        by default the transport's own and ``Accept: accept``.
        Raises :class:`TransportError` (one line: refused, unresolvable, reset, ...).
        A ``gevent.Timeout`` set by the caller passes through.
        """
        url = self.url(path)
        if headers is None:
            headers = self.request_headers(accept)
        request_uri = (self._url.path.rstrip("/") or "") + path
        try:
            client = self.client_pool.get_client(self._url)
            raw = client.request(method, request_uri, body=body or b"", headers=headers)
        except gevent.Timeout:
            raise
        except (OSError, HTTPParseError) as exc:
            raise transport_error(exc, url) from None
        return LineResponse(raw, url)
