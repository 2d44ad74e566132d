"""The control plane's renderer of the one error model: every error, whatever raised it, reaches
the client as

    {"error": {"code": "<stable code>", "message": "<what and what to do>", "field": "<optional>"}}

with the HTTP status its code carries (gpuplex/error_codes.py), and extra keys only where they
help (`problems` for an invalid spec, `current_revision` for a stale apply). Unexpected exceptions
become `internal_error` with no detail: the traceback goes to the log.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpuplex.errors import ErrorCode, GpuplexError, RequestRefused, SpecError, StaleRevisionError
from gpuplex.server.request_model import UNKNOWN_FIELD

log = logging.getLogger("gpuplex.server")

#: The code gpuplex.server.metrics.endpoint answers /metrics without credentials with.
UNAUTHENTICATED = ErrorCode.UNAUTHENTICATED

#: Every code the REST API answers with; the OpenAPI document and docs/control-plane.md list each.
API_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.UNAUTHENTICATED,
    ErrorCode.FORBIDDEN,
    ErrorCode.CSRF_REJECTED,
    ErrorCode.NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED,
    ErrorCode.REQUEST_TIMEOUT,
    ErrorCode.SPEC_STALE,
    ErrorCode.NO_QUEUES,
    ErrorCode.JOB_STATE,
    ErrorCode.CONFLICT,
    ErrorCode.TOO_MANY_JOBS,
    ErrorCode.TOO_MANY_FAILED_AUTH,
    ErrorCode.TOO_MANY_SIGN_INS,
    ErrorCode.REQUEST_TOO_LARGE,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.SPEC_INVALID,
    ErrorCode.JOB_INVALID,
    ErrorCode.PLAN_INVALID,
    ErrorCode.METER_INPUT_INVALID,
    ErrorCode.STORE_VALUE_REFUSED,
    ErrorCode.INTERNAL,
    ErrorCode.STORE_UNAVAILABLE,
    ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE,
)

#: Names and labels: no control characters (PostgreSQL refuses NUL; none belongs in a name).
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"

#: What an error status means on this API, for the OpenAPI document (which adds its codes).
_MEANING = {
    401: "No token, or an unknown, revoked or expired one.",
    403: "The caller's role may not do this.",
    404: "No such object, or another tenant's.",
    405: "The path does not take this method.",
    408: "The request body did not all arrive in time.",
    409: "A conflict, such as a spec applied on a stale revision or a finished job cancelled.",
    413: "The request body is larger than the API takes (8 MiB).",
    422: "Invalid input; `field` names it.",
    429: "Too many of something at once, such as a tenant's jobs not finished, or failed "
    "credentials from one address; retry later (`Retry-After` says when, where it is given).",
    500: "An unexpected failure; the server log has the details.",
    503: "The store, or the identity provider that checks a sign-in token, is unavailable; retry.",
}
#: The codes of the errors Starlette and FastAPI raise themselves, by the status they give.
_STARLETTE_CODES = {
    code.status: code
    for code in (
        ErrorCode.UNAUTHENTICATED,
        ErrorCode.FORBIDDEN,
        ErrorCode.NOT_FOUND,
        ErrorCode.METHOD_NOT_ALLOWED,
        ErrorCode.CONFLICT,
    )
}
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")  # `problems`, `current_revision` where they help

    code: str
    message: str
    field: str | None = None


class ErrorReply(BaseModel):
    """The one error body, as the OpenAPI publishes it."""

    error: ErrorDetail


def error_responses(codes: Sequence[ErrorCode]) -> dict[int | str, dict[str, Any]]:
    """The routers' `responses=`: each status the codes have, with what it means and its codes."""
    by_status: dict[int, list[ErrorCode]] = {}
    for code in codes:
        by_status.setdefault(code.status, []).append(code)
    return {
        status: {
            "model": ErrorReply,
            "description": f"{_MEANING[status]} Codes: "
            + ", ".join(f"`{code}`" for code in by_status[status])
            + ".",
        }
        for status in sorted(by_status)
    }


#: The error statuses every operation may answer with, for the routers' `responses=`.
ERROR_RESPONSES = error_responses(API_CODES)


class ApiProblem(RequestRefused):
    """An error the API answers with; raise it from a route. `field` names the input at fault;
    `retry_after_s` becomes a `Retry-After` header; `extra` adds keys to the body."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        field: str | None = None,
        retry_after_s: int | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(code, message)
        self.field = field
        self.retry_after_s = retry_after_s
        self.extra = extra


def problem_body(error: GpuplexError) -> dict[str, Any]:
    """The error as the REST API's JSON body."""
    body: dict[str, Any] = {"code": str(error.code), "message": error.message}
    if isinstance(error, SpecError):
        if error.problems:
            body["field"] = error.problems[0].dotted_path
        body["problems"] = [
            {"field": p.dotted_path, "message": p.message, "line": p.line, "column": p.column}
            for p in error.problems
        ]
    elif isinstance(error, StaleRevisionError):
        body["field"] = "base_revision"
        body["current_revision"] = error.current_revision or 0
    elif isinstance(error, ApiProblem):
        if error.field is not None:
            body["field"] = error.field
        body.update(error.extra)
    return {"error": body}


def problem_response(error: GpuplexError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """The error as a response, with the status its code carries."""
    if error.code is ErrorCode.UNAUTHENTICATED:
        headers = {"www-authenticate": "Bearer", **(headers or {})}
    if error.retry_after_s is not None:
        headers = {"retry-after": str(error.retry_after_s), **(headers or {})}
    return JSONResponse(problem_body(error), status_code=error.status, headers=headers)


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
    async def on_gpuplex(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, GpuplexError)
        return problem_response(error)

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
        return problem_response(ApiProblem(ErrorCode.INVALID_REQUEST, message, field=field or None))

    async def on_http(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        if error.status_code == http.HTTPStatus.BAD_REQUEST:  # FastAPI's "error parsing the body"
            return problem_response(
                ApiProblem(
                    ErrorCode.INVALID_REQUEST, "body: not a JSON document in UTF-8", field="body"
                )
            )
        code = _STARLETTE_CODES.get(error.status_code, ErrorCode.INVALID_REQUEST)
        return problem_response(RequestRefused(code, str(error.detail)), error.headers)

    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = "internal error; the server log has details"
        return problem_response(RequestRefused(ErrorCode.INTERNAL, message))

    app.add_exception_handler(GpuplexError, on_gpuplex)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
