"""The control plane's one error body and the one table from error codes to HTTP status.

Every error, whatever raised it, reaches the client as

    {"error": {"code": "<stable code>", "message": "<what and what to do>", "field": "<optional>"}}

with extra keys only where they help (`problems` for an invalid spec, `current_revision` for a stale
apply). Unexpected exceptions become `internal_error` with no detail: the traceback goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpuplex.errors import ErrorCode, GpuplexError, SpecError, StaleRevisionError
from gpuplex.server.request_model import UNKNOWN_FIELD

log = logging.getLogger("gpuplex.server")

#: Codes of the control plane's own, besides gpuplex.errors.ErrorCode.
UNAUTHENTICATED = "unauthenticated"
FORBIDDEN = "forbidden"
INVALID_REQUEST = "invalid_request"
CONFLICT = "conflict"
METHOD_NOT_ALLOWED = "method_not_allowed"
REQUEST_TOO_LARGE = "request_too_large"  # the body is over the limit (server/body_guard.py)
REQUEST_TIMEOUT = "request_timeout"  # the body did not all come in time
INTERNAL = "internal_error"

#: Names and labels: no control characters (PostgreSQL refuses NUL; none belongs in a name).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"

#: The one place an error code becomes an HTTP status.
HTTP_STATUS: dict[str, int] = {
    UNAUTHENTICATED: 401,
    FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    METHOD_NOT_ALLOWED: 405,
    REQUEST_TIMEOUT: 408,
    CONFLICT: 409,
    REQUEST_TOO_LARGE: 413,
    ErrorCode.SPEC_STALE: 409,
    INVALID_REQUEST: 422,
    ErrorCode.SPEC_INVALID: 422,
    ErrorCode.PLAN_INVALID: 422,
    ErrorCode.METER_INPUT_INVALID: 422,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.STORE_VALUE_REFUSED: 422,
    INTERNAL: 500,
}

_STARLETTE_CODES = {401: UNAUTHENTICATED, 403: FORBIDDEN, 404: ErrorCode.NOT_FOUND}
_STARLETTE_CODES |= {405: METHOD_NOT_ALLOWED, 409: CONFLICT}
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # `problems`, `current_revision` where they help

    code: str
    message: str
    field: str | None = None


class ErrorReply(BaseModel):
    """The one error body, as the OpenAPI publishes it."""

    error: ErrorDetail


#: The error statuses every operation may answer with, for the routers' `responses=`.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorReply, "description": description}
    for status, description in (
        (401, "No token, or an unknown, revoked or expired one."),
        (403, "The caller's role may not do this."),
        (404, "No such object, or another tenant's."),
        (408, "The request body did not all arrive in time (`request_timeout`)."),
        (409, "A conflict, such as a spec applied on a stale revision (`spec_stale`)."),
        (413, "The request body is larger than the API takes (`request_too_large`, 8 MiB)."),
        (422, "Invalid input; `field` names it."),
        (503, "The store is unavailable; retry."),
    )
}


class ApiProblem(Exception):
    """An error the API answers with; raise it from a route."""

    def __init__(self, code: str, message: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.extra = extra

    @property
    def status(self) -> int:
        return HTTP_STATUS.get(self.code, 400)


def problem_response(problem: ApiProblem, headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": str(problem.code), "message": problem.message}
    if problem.field is not None:
        body["field"] = problem.field
    body.update(problem.extra)
    return JSONResponse({"error": body}, status_code=problem.status, headers=headers)


def from_gpuplex_error(error: GpuplexError) -> ApiProblem:
    if isinstance(error, SpecError):
        problems = [
            {"field": p.dotted_path, "message": p.message, "line": p.line, "column": p.column}
            for p in error.problems
        ]
        first = error.problems[0].dotted_path if error.problems else None
        return ApiProblem(error.code, error.message, field=first, problems=problems)
    if isinstance(error, StaleRevisionError):
        return ApiProblem(
            error.code,
            error.message,
            field="base_revision",
            current_revision=error.current_revision or 0,
        )
    return ApiProblem(error.code, error.message)


def validation_field(location: Sequence[object], error_type: str) -> str:
    """The field a request validation error names, as the client wrote it: `limit`, not
    `query.limit`; `body` for a body that is not JSON at all."""
    parts = [str(part) for part in location]
    if error_type == "json_invalid":
        return "body"
    if len(parts) > 1 and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(parts)


def install_handlers(app: FastAPI) -> None:
    async def on_problem(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ApiProblem)
        headers = {"www-authenticate": "Bearer"} if error.code == UNAUTHENTICATED else None
        return problem_response(error, headers)

    async def on_gpuplex(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, GpuplexError)
        return problem_response(from_gpuplex_error(error))

    async def on_validation(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        errors = error.errors()
        first: dict[str, Any] = dict(errors[0]) if errors else {"msg": "invalid request"}
        location = list(first.get("loc", ()))
        context: dict[str, Any] = first.get("ctx") or {}
        if first.get("type") == UNKNOWN_FIELD and "field" in context:
            location.append(str(context["field"]))  # raised by the object holding the unknown field
        field = validation_field(location, str(first.get("type", "")))
        message = f"{field or 'request'}: {first.get('msg', 'invalid')}"
        return problem_response(ApiProblem(INVALID_REQUEST, message, field=field or None))

    async def on_http(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        if error.status_code == 400:  # FastAPI's "error parsing the body": invalid input, a 422
            return problem_response(
                ApiProblem(INVALID_REQUEST, "body: not a JSON document in UTF-8", field="body")
            )
        code = _STARLETTE_CODES.get(error.status_code, INVALID_REQUEST)
        problem = ApiProblem(code, str(error.detail))
        return JSONResponse(
            {"error": {"code": str(code), "message": problem.message}},
            status_code=error.status_code,
            headers=error.headers,
        )

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(ApiProblem(INTERNAL, "internal error; the server log has details"))

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(GpuplexError, on_gpuplex)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
