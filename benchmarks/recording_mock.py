"""The basic server's app and mock engine, recording when each token left the engine: the ground truth.

    python -m benchmarks.recording_mock --port P --record tokens.jsonl [--mock-ttft-ms 200 --mock-itl-ms 20]

It serves exactly what ``python -m server --engine mock`` serves (same app, same
engine, same schedule) and writes two kinds of JSON lines:

* ``{"prompt": <text>, "arrival": t, "token_times": [...]}`` from the engine:
  when the request reached the engine, and the ``time.time()`` at which each
  token was handed to the app, which formats it and writes it to the socket
  without awaiting anything else (the stream's truth);
* ``{"request": <request body>, "body_sent": t}`` from an ASGI wrapper: when the
  last byte of the response body was handed to the server (the sync truth, which
  includes building the JSON answer).

On a loaded machine the event loop runs the engine late, so these times include
the server's own lateness and are what a perfect client would see. A client's
measurement minus this truth is its own error: loopback delivery plus its own
scheduling delay. :func:`server_truth` pairs measured results with their
truth (the load generator's tests and ``benchmarks.loadgen_capacity`` use it):
each prompt carries its record id in brackets, ``[chat-3] ...``.
"""

from __future__ import annotations

import contextvars
import json
import os
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import uvicorn

from llmload.core.cliargs import OneLineParser
from llmload.core.metrics import RequestResult, request_metrics
from llmload.core.paths import REPO_ROOT
from llmload.targets import RunningTarget, Target, TargetKind, TargetSettings, start_target
from server.app import create_app
from server.engines.mock import MockEngine
from server.settings import ServerSettings


#: The request's ``X-Request-Id`` header (``vllm bench serve`` sends one per request), set by the ASGI wrapper.
CLIENT_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("client_request_id", default=None)


class RecordingMockEngine(MockEngine):
    """The mock engine, also appending each request's token emission times to a JSONL file."""

    def __init__(self, record_path: str, **kwargs):
        super().__init__(**kwargs)
        self.record = open(record_path, "a", encoding="utf-8")

    async def generate(self, request_id, prompt, params, timing=None):
        arrival, times = time.time(), []
        try:
            async for delta in super().generate(request_id, prompt, params, timing):
                times.append(time.time())
                yield delta
        finally:
            entry = {"prompt": prompt.text, "request_id": CLIENT_REQUEST_ID.get(), "arrival": arrival,
                     "token_times": times}
            self.record.write(json.dumps(entry) + "\n")
            self.record.flush()


def recording_body_sent(app, record):
    """ASGI wrapper: append ``{"request": body, "body_sent": t}`` once each response body is complete.

    It also hands the request's ``X-Request-Id`` header to the engine's record (through
    :data:`CLIENT_REQUEST_ID`), so that clients without ``[id]`` prompts can be paired too.
    """

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        client_id = headers.get(b"x-request-id")
        CLIENT_REQUEST_ID.set(client_id.decode(errors="replace") if client_id else None)
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


#: A prompt's record id, as the test and benchmark prompt files write it: ``[chat-3] What is ...``.
PROMPT_ID = re.compile(r"\[([\w.-]+)\]")


def read_record(path: str | Path) -> tuple[dict[str, list[dict]], dict[str, list[float]]]:
    """The recording, by request key: the engine's generations, and the times whole bodies were sent (in order).

    A generation's key is the client's ``X-Request-Id`` where it sent one, else the
    ``[id]`` its prompt starts with; bodies are keyed by the ``[id]`` only.
    """
    generations: dict[str, list[dict]] = defaultdict(list)
    bodies: dict[str, list[float]] = defaultdict(list)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            generated = "token_times" in entry
            match = PROMPT_ID.search(entry["prompt"] if generated else entry["request"])
            key = (entry.get("request_id") if generated else None) or (match.group(1) if match else None)
            if key is None:
                continue  # /v1/models, /health, a client's warm-up request
            if generated:
                generations[key].append(entry)
            else:
                bodies[key].append(entry["body_sent"])
    return generations, bodies


def server_truth(record_path: str | Path, results: list[RequestResult]) -> list[RequestResult]:
    """For each measured result, the same request as the server served it (``None`` where none matches).

    Results are paired with the keys of :func:`read_record`: a generation by the
    result's ``request_id`` (the ``X-Request-Id`` the suite's client sends), else
    by its ``prompt_id``; a body by its ``prompt_id``. Stream: the tokens'
    emission times, as offsets from the client's start. Sync: the time the whole
    JSON body was sent. A key met more than once is paired in time order: the
    n-th request of a prompt with its n-th generation (and body).
    """
    generations, bodies = read_record(record_path)
    seen: dict[str, int] = defaultdict(int)
    seen_bodies: dict[str, int] = defaultdict(int)
    truth: list[RequestResult | None] = [None] * len(results)
    for i in sorted(range(len(results)), key=lambda i: results[i].start_time):
        r = results[i]
        key = r.request_id if r.request_id in generations else r.prompt_id
        n, b = seen[key], seen_bodies[r.prompt_id]
        seen[key] += 1
        seen_bodies[r.prompt_id] += 1
        runs, sent = generations.get(key, []), bodies.get(r.prompt_id, [])
        if n >= len(runs):
            continue
        offsets = [t - r.start_time for t in runs[n]["token_times"]]
        end = sent[b] - r.start_time if b < len(sent) else (offsets[-1] if offsets else 0.0)
        truth[i] = RequestResult(r.request_id, r.task, r.api, r.mode, r.start_time, end_offset=end,
                                 token_offsets=offsets if r.mode == "stream" else [], output_tokens=len(offsets))
    return truth


def measurement_errors_ms(measured: list[RequestResult], truth: list[RequestResult | None],
                          field: str = "ttft") -> list[float]:
    """Measured minus true ``field`` (``e2e``, ``ttft``, ``tpot``) in ms, for each request that has both."""
    errors = []
    for m, t in zip(measured, truth):
        if t is None or not m.success:
            continue
        got, want = getattr(request_metrics(m), field), getattr(request_metrics(t), field)
        if got is not None and want is not None:
            errors.append((got - want) * 1000.0)
    return errors


def stamp_delays_ms(measured: list[RequestResult], truth: list[RequestResult | None]) -> list[float]:
    """Each output chunk's measured offset minus the server's, in ms (how late the client stamped it), for every
    request that has both."""
    delays = []
    for m, t in zip(measured, truth):
        if t is None or not m.success:
            continue
        delays.extend((got - want) * 1000.0 for got, want in zip(m.token_offsets, t.token_offsets))
    return delays


class RecordingMock(TargetKind):
    """This server as a server under test, recording into ``record``: the benchmarks start it as they start
    every server (:func:`llmload.targets.start_target`), with the settings' mock schedule."""

    name = "recording-mock"
    description = "the mock engine, recording when each token left it (the benchmarks' ground truth)"
    needs_model = False

    def __init__(self, record: Path):
        self.record = Path(record)

    def command(self, settings: TargetSettings, port: int) -> list[str]:
        return [sys.executable, "-m", "benchmarks.recording_mock", "--port", str(port), "--record", str(self.record),
                "--mock-ttft-ms", f"{settings.mock_ttft_ms:g}", "--mock-itl-ms", f"{settings.mock_itl_ms:g}"]

    def env(self, settings: TargetSettings) -> dict[str, str]:
        return {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}


def start_recording_mock(record: Path, ttft_ms: float, itl_ms: float, log: Path) -> RunningTarget:
    """The recording mock on a free port, started as every server under test is, and healthy (stop it)."""
    kind = RecordingMock(record)
    settings = TargetSettings(mock_ttft_ms=ttft_ms, mock_itl_ms=itl_ms, start_timeout=60.0)
    return start_target(Target(kind.name, kind.name), kind, settings, log, progress=False)


def main() -> None:
    parser = OneLineParser(prog="python -m benchmarks.recording_mock", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--mock-ttft-ms", type=float, default=ServerSettings.mock_ttft_ms)
    parser.add_argument("--mock-itl-ms", type=float, default=ServerSettings.mock_itl_ms)
    args = parser.parse_args()
    settings = ServerSettings(engine="mock", host="127.0.0.1", port=args.port, mock_ttft_ms=args.mock_ttft_ms,
                              mock_itl_ms=args.mock_itl_ms, log_level="warning")
    engine = RecordingMockEngine(args.record, model="mock", served_model_name="mock", max_model_len=None,
                                 ttft_ms=args.mock_ttft_ms, itl_ms=args.mock_itl_ms)
    app = recording_body_sent(create_app(settings, engine=engine), engine.record)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
