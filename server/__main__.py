"""``python -m server``: start the basic OpenAI-compatible server.

Flags and their ``LLMLOAD_*`` environment defaults come from
:class:`server.settings.ServerSettings`, so this and ``uvicorn server.app:app``
start the same server from the same settings.
"""

from __future__ import annotations

import errno
import logging
import socket

from llmload.core.cliargs import OneLineParser, print_error
from server.settings import ServerSettings


def build_parser(defaults: ServerSettings) -> OneLineParser:
    parser = OneLineParser(
        prog="python -m server",
        description="Basic OpenAI-compatible LLM server: /v1/completions, /v1/chat/completions (sync and SSE "
                    "streaming), /v1/models, /health. Each flag defaults to the LLMLOAD_<FLAG> environment variable "
                    "(LLMLOAD_MAX_NUM_SEQS for --max-num-seqs; on/off values for switches).",
    )
    ServerSettings.add_arguments(parser, defaults)
    return parser


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
    settings = ServerSettings.from_args(build_parser(ServerSettings.from_env()).parse_args(argv))
    problem = bind_problem(settings.host, settings.port)
    if problem:
        return print_error(problem)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from server.app import create_app  # fastapi and uvicorn: only once the flags are valid
    from server.engines import create_engine  # torch: only once the flags are valid
    from server.limits import header_timeout_protocol  # uvicorn's protocols: only once the flags are valid

    # Load the model before serving, so that one that cannot load is a one-line error.
    try:
        engine = create_engine(settings)
        engine.start()
    except Exception as exc:
        return print_error(f"cannot start the {settings.engine} engine on model {settings.model or 'default'!r}: "
                           f"{type(exc).__name__}: {exc}")
    app = create_app(settings, engine=engine, engine_started=True)
    http = header_timeout_protocol(settings.header_timeout_s) if settings.header_timeout_s else "auto"
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, http=http,
                timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
