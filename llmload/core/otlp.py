"""An in-process OTLP/HTTP span receiver: ``POST /v1/traces`` on 127.0.0.1, every span appended to a JSONL file.

The runner starts one (``--otel-receiver``) and has vLLM export its spans to
it (``--otlp-traces-endpoint``), so that no collector is needed; the tests use
it to receive the load generator's own spans (``--otel-endpoint``). A
:class:`SpanReceiver` serves protobuf and JSON bodies (gzip or not) from a
thread, decodes them (:func:`llmload.core.spans.decode_otlp`) and appends each
span to the file it is routed to now (:meth:`SpanReceiver.route`: a cell's
``spans.jsonl`` while the cell runs, else the fallback). A body it cannot
read gets 400 and is counted, never written.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterable

from llmload.core.services import local_url
from llmload.core.spans import JSON, PROTOBUF, SpanDecodeError, append_spans, decode_otlp

TRACES_PATH = "/v1/traces"
#: The largest body taken (OTLP exporters send batches of at most a few MiB).
MAX_BODY = 64 * 2 ** 20


class SpanReceiver:
    """Receives OTLP/HTTP spans on ``127.0.0.1:port`` and appends them to the routed file (see the module doc)."""

    def __init__(self, fallback: str | Path | None = None, port: int = 0):
        self.fallback = Path(fallback) if fallback is not None else None
        self._port = port
        self._server: ThreadingHTTPServer | None = None
        self._lock = threading.Condition()
        self._path = self.fallback
        self._seen: set[str] = set()  # trace ids received since the last route()
        self.spans = 0  # spans received in all
        self.bad = 0  # bodies refused (not OTLP)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Serve in a daemon thread; the URL to export to (``http://127.0.0.1:PORT/v1/traces``)."""
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self.url

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return local_url(self.port, TRACES_PATH)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> "SpanReceiver":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ routing

    def route(self, path: str | Path | None) -> None:
        """Append the spans received from now on to ``path`` (None: the fallback; no fallback: drop them)."""
        with self._lock:
            self._path = Path(path) if path is not None else self.fallback
            self._seen = set()

    def wait_for(self, trace_ids: Iterable[str], timeout: float) -> set[str]:
        """Wait until spans of every trace id in ``trace_ids`` have come in since the last :meth:`route`, at most
        ``timeout`` seconds; the ids still missing."""
        wanted = set(trace_ids)
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                missing = wanted - self._seen
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self._lock.wait(left)

    def take(self, body: bytes, content_type: str) -> int:
        """Decode one body and append its spans to the routed file; how many (:class:`SpanDecodeError` if bad)."""
        records = decode_otlp(body, content_type)
        with self._lock:
            if self._path is not None and records:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with self._path.open("a", encoding="utf-8") as handle:
                    append_spans(handle, records)
            self._seen.update(r.trace_id for r in records)
            self.spans += len(records)
            self._lock.notify_all()
        return len(records)


def _handler(receiver: SpanReceiver):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != TRACES_PATH:
                return self._answer(404, b"only POST /v1/traces", "text/plain")
            kind = (self.headers.get("Content-Type") or PROTOBUF).split(";")[0].strip().lower()
            try:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise SpanDecodeError(f"body of {length} bytes: more than {MAX_BODY}")
                body = _decompress(self.rfile.read(length), self.headers.get("Content-Encoding") or "")
                receiver.take(body, kind)
            except (SpanDecodeError, ValueError, OSError, EOFError, zlib.error) as exc:
                receiver.bad += 1
                return self._answer(400, str(exc).encode("utf-8", "replace"), "text/plain")
            # an empty ExportTraceServiceResponse: no bytes in protobuf, {} in JSON
            self._answer(200, b"{}" if kind == JSON else b"", JSON if kind == JSON else PROTOBUF)

        def _answer(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass  # quiet: the runner's output is its progress lines

    return Handler


def _decompress(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    raise SpanDecodeError(f"content encoding {encoding!r}: gzip, deflate or none")
