"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``, never a traceback."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from server.protocol import ErrorInfo, ErrorResponse

log = logging.getLogger("server")

#: Status logged for a request whose client went away before the answer (nginx's convention).
CLIENT_CLOSED_REQUEST = 499


class APIError(Exception):
    """An error to return to the client as OpenAI-shaped JSON."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code


class ClientDisconnected(Exception):
    """The client closed the connection before its non-streamed answer was ready."""


def error_response(status: int, message: str, type_: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-shaped error: ``{"error": {"message", "type", "param", "code"}}``."""
    body = ErrorResponse(error=ErrorInfo(message=message, type=type_, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"Invalid JSON body: {first.get('msg', '')} {first.get('ctx', {}).get('error', '')}".strip(), None
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    param = ".".join(loc) or None
    if param is None:  # the body as a whole: absent, or JSON that is not an object
        return "The request body must be a JSON object (Content-Type: application/json).", None
    return f"{param}: {first.get('msg', 'invalid value')}", param


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves the server as ``{"error": {message, type, param, code}}``, never a trace."""

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.type, exc.param, exc.code)

    @app.exception_handler(ClientDisconnected)
    async def _client_gone(request: Request, _: ClientDisconnected) -> Response:
        log.info("client disconnected from %s before the answer; generation cancelled", request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(exc.status_code, str(exc.detail), type_)

    @app.exception_handler(Exception)
    async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, f"internal server error: {type(exc).__name__}", "internal_server_error")
