"""A tiny scripted OpenAI-style server for the load generator's tests: good streams, slow ones and faults.

The request body's ``model`` picks the behaviour (``cycle`` rotates through
:data:`CYCLE`, one behaviour per request, so that one Locust run meets them all):

* ``ok``: three tokens, 20 ms apart, a usage chunk and ``[DONE]`` (JSON body in sync mode)
* ``slow``: a role-only chunk at once, then three small tokens ``--gap`` seconds apart
* ``http500``: HTTP 500 with an OpenAI error body
* ``malformed``: a chunk that is not JSON
* ``nodone``: tokens, then the body ends without ``[DONE]``
* ``midstream``: one token, then ``data: {"error": ...}`` in the HTTP 200 stream
* ``stall``: one token, then silence for 30 s (a client time-out)
* ``drop``: one token, then the connection is closed mid-body
* ``zerousage`` (not in the cycle): three tokens and a usage of 0 completion tokens
* ``thinking`` (not in the cycle): two reasoning chunks (``reasoning_content``), then a tool call and the answer
* ``timed`` (not in the cycle): ``ok`` with the server's per-request timing (:data:`TIMING`) as vLLM sends it
  with ``--enable-per-request-metrics``: ``metrics`` in the final usage chunk, the sync body, and (Responses)
  ``response.completed``'s response
* ``chunky`` (not in the cycle): three chunks of two words each, final usage only (no running counts)
* ``reject_once`` (not in the cycle): HTTP 429 with ``Retry-After: 1`` the first time a request id
  (``X-Request-Id``) is seen, ``ok`` when it comes again (a retry)
* ``unavailable_third`` (not in the cycle): HTTP 503 for every third request (the 1st, 4th, ...), ``ok`` otherwise
* ``split`` (not in the cycle): each token's event written in two parts ``SPLIT_GAP`` s apart, cut inside a
  line (inside a multi-byte character where the token has one); ``sent_times`` when each was whole

``POST /v1/responses`` answers ``ok`` (``timed`` for the model ``timed``) as the Responses API does (named events,
``response.completed`` with usage), or 404 ``{"detail": "Not Found"}`` when
started with ``--no-responses`` (a server without the endpoint).

``GET /v1/models`` lists ``--models-id`` after ``--models-delay`` seconds (a slow
or hanging look-up); ``GET /lookups`` says how many times it was asked.

Run it standalone (``python fault_server.py --port P``) or in a thread
(:func:`start_in_thread`). ``last_headers`` keeps the last request's headers and
``sent_times`` the epoch times the last ``slow`` answer's tokens were written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CYCLE = ("ok", "http500", "malformed", "nodone", "midstream", "stall", "drop")
TOKENS = (" alpha", " beta", " gamma")
CHUNKY = (" one two", " three four", " five six")
SPLIT = ("é", " 日本", " ok")
SPLIT_GAP = 0.1
#: The per-request timing ``timed`` answers carry (vLLM's field names, its nested speculative-decoding group).
TIMING = {"queue_time_ms": 1.5, "time_to_first_token_ms": 20.0, "generation_time_ms": 40.0, "mean_itl_ms": 20.0,
          "tokens_per_second": 50.0, "speculative_decoding": {"mean_acceptance_length": 1.0}}


class FaultHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event leaves when written (Nagle would hold small ones for an ACK)
    server: "FaultServer"

    def log_message(self, *args) -> None:  # quiet
        pass

    # ---------------------------------------------------------------- helpers

    def send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, payload) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.chunk(f"data: {data}\n\n".encode())

    def token(self, text: str) -> None:
        if self.api == "chat":
            self.event({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})
        else:
            self.event({"choices": [{"index": 0, "text": text, "finish_reason": None}]})

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    # ---------------------------------------------------------------- routes

    def do_GET(self) -> None:
        if self.path == "/health":
            self.send_json(200, {"status": "ok"})
        elif self.path.endswith("/v1/models"):
            with self.server.lock:
                self.server.lookups += 1
            time.sleep(self.server.models_delay)
            self.send_json(200, {"object": "list", "data": [{"id": self.server.models_id, "object": "model"}]})
        elif self.path == "/lookups":
            self.send_json(200, {"lookups": self.server.lookups})
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found_error"}})

    def do_POST(self) -> None:
        self.server.last_headers = dict(self.headers)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.api = "chat" if self.path.endswith("/chat/completions") else "completion"
        if self.path.endswith("/v1/responses"):
            if self.server.no_responses:
                self.send_json(404, {"detail": "Not Found"})  # what FastAPI answers for a route it lacks
            else:
                self.do_responses(body)
            return
        behaviour = body.get("model", "ok")
        if behaviour == "cycle":
            behaviour = next(self.server.cycle)
        getattr(self, f"do_{behaviour}", self.do_unknown)(body)

    def do_unknown(self, body) -> None:
        self.send_json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})

    def do_ok(self, body, timing: dict | None = None) -> None:
        extra = {"metrics": timing} if timing else {}
        if not body.get("stream"):
            time.sleep(0.06)
            text = "".join(TOKENS)
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if self.api == "chat" \
                else {"index": 0, "text": text}
            self.send_json(200, {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 3},
                                 **extra})
            return
        self.start_stream()
        for text in TOKENS:
            time.sleep(0.02)
            self.token(text)
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(TOKENS)}, **extra})
        self.event("[DONE]")
        self.end_stream()

    def do_timed(self, body) -> None:
        self.do_ok(body, TIMING)

    def do_zerousage(self, body) -> None:
        """Three tokens, but a usage that says 0 completion tokens (a server that under-reports)."""
        if not body.get("stream"):
            text = "".join(TOKENS)
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if self.api == "chat" \
                else {"index": 0, "text": text}
            self.send_json(200, {"choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": 0}})
            return
        self.start_stream()
        for text in TOKENS:
            self.token(text)
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}})
        self.event("[DONE]")
        self.end_stream()

    def do_thinking(self, body) -> None:
        """Reasoning first (the older ``reasoning_content`` name), then a tool call's deltas, then text."""
        self.start_stream()
        self.event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for text in (" think", " more"):
            time.sleep(0.02)
            self.event({"choices": [{"index": 0, "delta": {"reasoning_content": text}}]})
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        time.sleep(0.02)
        self.event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
        time.sleep(0.02)
        self.token(TOKENS[0])
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5,
                                             "completion_tokens_details": {"reasoning_tokens": 2}}})
        self.event("[DONE]")
        self.end_stream()

    def do_chunky(self, body) -> None:
        """Chunks of two words each, 40 ms apart, and only a final usage: the client must count each chunk."""
        self.start_stream()
        for text in CHUNKY:
            time.sleep(0.04)
            self.token(text)
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2 * len(CHUNKY)}})
        self.event("[DONE]")
        self.end_stream()

    def do_split(self, body) -> None:
        """Each event in two HTTP chunks (two reads for the client) ``SPLIT_GAP`` apart, cut mid-line."""
        self.start_stream()
        sent = []
        for text in SPLIT:
            payload = {"choices": [{"index": 0, "delta": {"content": text}}]}
            event = f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()
            token = text.encode()
            cut = event.index(token) + len(token) // 2 + 1  # inside 'é' and '日'
            self.chunk(event[:cut])
            time.sleep(SPLIT_GAP)
            self.chunk(event[cut:])
            sent.append(time.time())
        self.server.sent_times = sent
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(SPLIT)}})
        self.event("[DONE]")
        self.end_stream()

    def do_responses(self, body) -> None:
        usage = {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": len(TOKENS),
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 3 + len(TOKENS)}
        done = {"id": "resp_1", "object": "response", "status": "completed", "error": None, "usage": usage,
                "output": [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "".join(TOKENS), "annotations": []}]}]}
        if body.get("model") == "timed":
            done["metrics"] = TIMING
        if not body.get("stream"):
            self.send_json(200, done)
            return
        self.start_stream()

        def named(payload: dict) -> None:
            self.chunk(f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode())

        named({"type": "response.created", "response": {**done, "status": "in_progress", "usage": None}})
        for text in TOKENS:
            time.sleep(0.02)
            named({"type": "response.output_text.delta", "item_id": "msg_1", "delta": text})
        named({"type": "response.completed", "response": done})
        self.end_stream()

    def do_slow(self, body) -> None:
        self.start_stream()
        self.event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        sent = []
        for text in TOKENS:
            time.sleep(self.server.gap)
            self.token(text)
            sent.append(time.time())
        self.server.sent_times = sent
        self.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": len(TOKENS)}})
        self.event("[DONE]")
        self.end_stream()

    def do_reject_once(self, body) -> None:
        request_id = self.headers.get("X-Request-Id", "")
        with self.server.lock:
            seen = request_id in self.server.seen_ids
            self.server.seen_ids.add(request_id)
        if seen:
            self.do_ok(body)
        else:
            self.send_json(429, {"error": {"message": "too many requests: try again in 1 s", "type": "rate_limit"}},
                           {"Retry-After": "1"})

    def do_unavailable_third(self, body) -> None:
        with self.server.lock:
            count = self.server.counted
            self.server.counted += 1
        if count % 3 == 0:
            self.send_json(503, {"error": {"message": "server busy", "type": "service_unavailable"}})
        else:
            self.do_ok(body)

    def do_http500(self, body) -> None:
        self.send_json(500, {"error": {"message": "internal server error: RuntimeError",
                                       "type": "internal_server_error"}})

    def do_malformed(self, body) -> None:
        self.start_stream()
        self.token(TOKENS[0])
        self.chunk(b"data: {this is not json\n\n")
        self.event("[DONE]")
        self.end_stream()

    def do_nodone(self, body) -> None:
        self.start_stream()
        for text in TOKENS:
            self.token(text)
        self.end_stream()

    def do_midstream(self, body) -> None:
        self.start_stream()
        self.token(TOKENS[0])
        self.event({"error": {"message": "generation failed: RuntimeError: out of memory",
                              "type": "internal_server_error"}})
        self.event("[DONE]")
        self.end_stream()

    def do_stall(self, body) -> None:
        self.start_stream()
        self.token(TOKENS[0])
        time.sleep(30)

    def do_drop(self, body) -> None:
        self.start_stream()
        self.token(TOKENS[0])
        self.close_connection = True
        self.connection.shutdown(2)


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, gap: float = 0.3, models_delay: float = 0.0, models_id: str = "fault",
                 no_responses: bool = False):
        super().__init__(("127.0.0.1", port), FaultHandler)
        self.gap, self.models_delay, self.models_id = gap, models_delay, models_id
        self.no_responses = no_responses
        self.lookups, self.lock = 0, threading.Lock()
        self.seen_ids: set[str] = set()  # request ids ``reject_once`` has answered
        self.counted = 0  # requests ``unavailable_third`` has answered
        self.cycle = itertools.cycle(CYCLE)
        self.last_headers: dict = {}
        self.sent_times: list[float] = []  # when each token of the last ``slow`` answer was written

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        """A client that hung up mid-answer is expected here; anything else is printed as usual."""
        import sys
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def start_in_thread(port: int = 0, gap: float = 0.3, no_responses: bool = False) -> FaultServer:
    """Serve in a daemon thread; ``server.shutdown()`` stops it."""
    server = FaultServer(port, gap, no_responses=no_responses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--gap", type=float, default=0.3)
    parser.add_argument("--models-delay", type=float, default=0.0)
    parser.add_argument("--models-id", default="fault")
    parser.add_argument("--no-responses", action="store_true", help="answer 404 to POST /v1/responses")
    args = parser.parse_args()
    server = FaultServer(args.port, args.gap, args.models_delay, args.models_id, args.no_responses)
    print(f"serving on {server.url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
