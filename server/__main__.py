"""``python -m server``: start the basic OpenAI-compatible server.

Every flag defaults to its ``LLMLOAD_*`` environment variable, so this and
``uvicorn server.app:app`` start the same server from the same settings.
"""

from __future__ import annotations

import argparse
import errno
import logging
import socket
import sys

from server.engines import ENGINES
from server.settings import ServerSettings


def build_parser(defaults: ServerSettings) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m server",
        description="Basic OpenAI-compatible LLM server: /v1/completions, /v1/chat/completions (sync and SSE "
                    "streaming), /v1/models, /health. Each flag defaults to the LLMLOAD_<FLAG> environment variable.",
    )
    p.add_argument("--model", default=defaults.model,
                   help="Hugging Face id or local model folder (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--served-model-name", default=defaults.served_model_name,
                   help="model id clients send and /v1/models lists (default: the model folder's name)")
    p.add_argument("--engine", choices=ENGINES, default=defaults.engine,
                   help="naive: transformers, one request at a time; batched: transformers, continuous batching; "
                        "mock: no model, fixed timings (default: %(default)s)")
    p.add_argument("--host", default=defaults.host, help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=defaults.port, help="port (default: %(default)s)")
    p.add_argument("--max-model-len", type=int, default=defaults.max_model_len,
                   help="context length limit (default: the model's own)")
    p.add_argument("--dtype", default=defaults.dtype, choices=("auto", "float32", "bfloat16", "float16"),
                   help="weights dtype (default: %(default)s = the checkpoint's)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads of the worker thread that runs the model (default: torch's, one per "
                        "core); /health reports the count in effect")
    p.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs,
                   help="batched engine: most requests decoded together; more wait (default: %(default)s)")
    p.add_argument("--no-prepack-weights", dest="prepack_weights", action="store_false",
                   default=defaults.prepack_weights,
                   help="batched engine: keep linear weights in their plain layout instead of oneDNN's blocked one "
                        "(slower decode steps; to measure what packing brings)")
    p.add_argument("--api-key", default=defaults.api_key, help="require 'Authorization: Bearer KEY' on /v1/*")
    p.add_argument("--mock-ttft-ms", type=float, default=defaults.mock_ttft_ms,
                   help="mock engine: time to first token in ms (default: %(default)s)")
    p.add_argument("--mock-itl-ms", type=float, default=defaults.mock_itl_ms,
                   help="mock engine: time between tokens in ms (default: %(default)s)")
    p.add_argument("--log-level", default=defaults.log_level, choices=("debug", "info", "warning", "error"),
                   help="log level (default: %(default)s)")
    return p


def bind_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (one line), or None when it can."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} is already in use: stop the other server or pass --port N"
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        except OverflowError:
            return f"port {port} is out of range (0-65535)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(ServerSettings.from_env())
    args = parser.parse_args(argv)
    if args.max_num_seqs < 1:
        parser.error(f"--max-num-seqs must be at least 1, got {args.max_num_seqs}")
    if args.max_model_len is not None and args.max_model_len < 1:
        parser.error(f"--max-model-len must be at least 1, got {args.max_model_len}")
    settings = ServerSettings(**{k: v for k, v in vars(args).items()})
    problem = bind_problem(settings.host, settings.port)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from server.app import create_app
    from server.engines import create_engine

    # Load the model before serving, so that one that cannot load is a one-line error.
    try:
        engine = create_engine(settings)
        engine.start()
    except Exception as exc:
        print(f"error: cannot start the {settings.engine} engine on model {settings.model or 'default'!r}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    app = create_app(settings, engine=engine, engine_started=True)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
