"""The gateway's renderer of the one error model: an error is `ApiError` with a code from
gpuplex/error_codes.py, and reaches the client as OpenAI sends errors,

    {"error": {"message": "...", "type": "<OpenAI error type>", "param": null, "code": "<code>"}}

with the HTTP status its code carries, so the `openai` client raises its typed exceptions
(AuthenticationError for 401, NotFoundError for 404, RateLimitError for 429, ...). The OpenAI type
follows from the status. One rule differs from the control plane: OpenAI answers every invalid
request with 400 (the client's BadRequestError), never 422, so a code whose status is 422 is
answered with 400 here."""

from __future__ import annotations

import orjson

from gpuplex.errors import ErrorCode, RequestRefused

#: Every code the gateway's app answers with (the front door's are in gpuplex/http_guard.py);
#: docs/gateway.md lists each with its status.
GATEWAY_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.INVALID_JSON,
    ErrorCode.INVALID_REQUEST,
    ErrorCode.UNSUPPORTED_PARAMETER,
    ErrorCode.OVER_LIMIT_ALWAYS,
    ErrorCode.INVALID_API_KEY,
    ErrorCode.METRICS_TOKEN_REQUIRED,
    ErrorCode.MODEL_NOT_FOUND,
    ErrorCode.NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED,
    ErrorCode.REQUEST_TIMEOUT,
    ErrorCode.REQUEST_TOO_LARGE,
    ErrorCode.RATE_LIMITED,
    ErrorCode.BUDGET_EXCEEDED,
    ErrorCode.BUDGET_THROTTLED,
    ErrorCode.QUEUE_FULL,
    ErrorCode.QUEUE_TIMEOUT,
    ErrorCode.TOO_MANY_FAILED_AUTH,
    ErrorCode.UPSTREAM_REPLY_TOO_LARGE,
    ErrorCode.UPSTREAM_EVENT_TOO_LARGE,
    ErrorCode.BACKEND_UNAVAILABLE,
    ErrorCode.LIMITER_UNAVAILABLE,
    ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE,
    ErrorCode.USAGE_UNAVAILABLE,
    ErrorCode.UPSTREAM_TIMEOUT,
    ErrorCode.INTERNAL,
)


def openai_status(code: ErrorCode) -> int:
    """The status the gateway answers `code` with: the code's own, but 400 for a 422."""
    return 400 if code.status == 422 else code.status


def openai_type(status: int) -> str:
    """The OpenAI error type of a status, as OpenAI and its clients pair them."""
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


#: Per code, worked out once: (status, OpenAI type); nothing is computed per request.
_RENDERED: dict[ErrorCode, tuple[int, str]] = {
    code: (openai_status(code), openai_type(openai_status(code))) for code in ErrorCode
}


class ApiError(RequestRefused):
    """An error the gateway answers with. `param` names the request field at fault;
    `retry_after_s` becomes a Retry-After header."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(code, message)
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def status(self) -> int:
        return _RENDERED[self.code][0]

    def body(self) -> bytes:
        return error_body(self.code, self.message, self.param)

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None:
            headers.append((b"retry-after", str(self.retry_after_s).encode()))
        return headers


def error_body(code: ErrorCode, message: str, param: str | None = None) -> bytes:
    """The OpenAI-style body of an error (also the gateway's front door's, gpuplex/http_guard.py)."""
    kind = _RENDERED[code][1]
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": str(code)}}
    )
