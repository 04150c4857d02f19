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
                   help="naive: transformers, one request at a time; mock: no model, fixed timings (default: %(default)s)")
    p.add_argument("--host", default=defaults.host, help="bind address (default: %(default)s)")
    p.add_argument("--port", type=int, default=defaults.port, help="port (default: %(default)s)")
    p.add_argument("--max-model-len", type=int, default=defaults.max_model_len,
                   help="context length limit (default: the model's own)")
    p.add_argument("--dtype", default=defaults.dtype, choices=("auto", "float32", "bfloat16", "float16"),
                   help="weights dtype (default: %(default)s = the checkpoint's)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads (default: torch's)")
    p.add_argument("--api-key", default=defaults.api_key, help="require 'Authorization: Bearer KEY' on /v1/*")
    p.add_argument("--mock-ttft-ms", type=float, default=defaults.mock_ttft_ms,
                   help="mock engine: time to first token in ms (default: %(default)s)")
    p.add_argument("--mock-itl-ms", type=float, default=defaults.mock_itl_ms,
                   help="mock engine: time between tokens in ms (default: %(default)s)")
    p.add_argument("--log-level", default=defaults.log_level, choices=("debug", "info", "warning", "error"),
                   help="log level (default: %(default)s)")
    return p


def port_is_free(host: str, port: int) -> bool:
    """True when ``host:port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser(ServerSettings.from_env()).parse_args(argv)
    settings = ServerSettings(**{k: v for k, v in vars(args).items()})
    if not port_is_free(settings.host, settings.port):
        print(f"error: port {settings.port} is already in use: stop the other server or pass --port N",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from server.app import create_app

    try:
        app = create_app(settings)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level,
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
