"""The basic server's app and mock engine, recording when each token left the engine: the tests' ground truth.

    python tests/locustfiles/recording_mock.py --port P --record tokens.jsonl [--mock-ttft-ms 200 --mock-itl-ms 20]

It serves exactly what ``python -m server --engine mock`` serves (same app, same
engine, same schedule) and writes two kinds of JSON lines:

* ``{"prompt": <text>, "token_times": [...]}`` from the engine: the ``time.time()``
  at which each token was handed to the app, which formats it and writes it to
  the socket without awaiting anything else (the stream's truth);
* ``{"request": <request body>, "body_sent": t}`` from an ASGI wrapper: when the
  last byte of the response body was handed to the server (the sync truth, which
  includes building the JSON answer).

On a loaded machine the event loop runs the engine late, so these times include
the server's own lateness and are what a perfect client would see. A client's
measurement minus this truth is its own error: loopback delivery plus its own
scheduling delay.
"""

from __future__ import annotations

import argparse
import json
import time

import uvicorn

from server.app import create_app
from server.engines.mock import MockEngine
from server.settings import ServerSettings


class RecordingMockEngine(MockEngine):
    """The mock engine, also appending each request's token emission times to a JSONL file."""

    def __init__(self, record_path: str, **kwargs):
        super().__init__(**kwargs)
        self.record = open(record_path, "a", encoding="utf-8")

    async def generate(self, request_id, prompt, params):
        times = []
        try:
            async for delta in super().generate(request_id, prompt, params):
                times.append(time.time())
                yield delta
        finally:
            self.record.write(json.dumps({"prompt": prompt.text, "token_times": times}) + "\n")
            self.record.flush()


def recording_body_sent(app, record):
    """ASGI wrapper: append ``{"request": body, "body_sent": t}`` once each response body is complete."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        request = bytearray()

        async def receive_and_keep():
            message = await receive()
            if message["type"] == "http.request":
                request.extend(message.get("body", b""))
            return message

        async def send_and_stamp(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                record.write(json.dumps({"request": request.decode(errors="replace"), "body_sent": time.time()})
                             + "\n")
                record.flush()

        return await app(scope, receive_and_keep, send_and_stamp)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--mock-ttft-ms", type=float, default=200.0)
    parser.add_argument("--mock-itl-ms", type=float, default=20.0)
    args = parser.parse_args()
    settings = ServerSettings(engine="mock", host="127.0.0.1", port=args.port, mock_ttft_ms=args.mock_ttft_ms,
                              mock_itl_ms=args.mock_itl_ms, log_level="warning")
    engine = RecordingMockEngine(args.record, model="mock", served_model_name="mock", max_model_len=None,
                                 ttft_ms=args.mock_ttft_ms, itl_ms=args.mock_itl_ms)
    app = recording_body_sent(create_app(settings, engine=engine), engine.record)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
