"""Errors the gateway answers with: an OpenAI-style JSON body, a stable `code`, and one table that
maps each code to its HTTP status. The `openai` client turns these into its typed exceptions
(AuthenticationError for 401, NotFoundError for 404, RateLimitError for 429, ...)."""

from __future__ import annotations

from enum import StrEnum

import orjson


class ApiCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_REQUEST = "invalid_request"
    BODY_TOO_LARGE = "request_too_large"
    BODY_TIMEOUT = "request_timeout"
    INVALID_API_KEY = "invalid_api_key"
    METRICS_TOKEN_REQUIRED = "metrics_token_required"  # noqa: S105 - a code, not a secret
    MODEL_NOT_FOUND = "model_not_found"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    RATE_LIMITED = "rate_limit_exceeded"
    TOO_MANY_FAILED_AUTH = "too_many_failed_auth"
    QUEUE_FULL = "queue_full"
    QUEUE_TIMEOUT = "queue_timeout"
    OVER_LIMIT_ALWAYS = "request_exceeds_limit"
    BACKEND_UNAVAILABLE = "backend_unavailable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_REPLY_TOO_LARGE = "upstream_reply_too_large"  # past gateway.max_reply_mib
    UPSTREAM_EVENT_TOO_LARGE = "upstream_event_too_large"  # an SSE event past max_event_kib
    LIMITER_UNAVAILABLE = "limiter_unavailable"
    USAGE_UNAVAILABLE = "usage_unavailable"  # the usage spool cannot take a record: not served
    INTERNAL = "internal_error"


#: code -> (HTTP status, OpenAI error type)
API_STATUS: dict[ApiCode, tuple[int, str]] = {
    ApiCode.INVALID_JSON: (400, "invalid_request_error"),
    ApiCode.INVALID_REQUEST: (400, "invalid_request_error"),
    ApiCode.OVER_LIMIT_ALWAYS: (400, "invalid_request_error"),
    ApiCode.BODY_TOO_LARGE: (413, "invalid_request_error"),
    ApiCode.BODY_TIMEOUT: (408, "invalid_request_error"),
    ApiCode.INVALID_API_KEY: (401, "authentication_error"),
    ApiCode.METRICS_TOKEN_REQUIRED: (401, "authentication_error"),
    ApiCode.MODEL_NOT_FOUND: (404, "invalid_request_error"),
    ApiCode.NOT_FOUND: (404, "invalid_request_error"),
    ApiCode.METHOD_NOT_ALLOWED: (405, "invalid_request_error"),
    ApiCode.RATE_LIMITED: (429, "rate_limit_error"),
    ApiCode.TOO_MANY_FAILED_AUTH: (429, "rate_limit_error"),
    ApiCode.QUEUE_FULL: (429, "rate_limit_error"),
    ApiCode.QUEUE_TIMEOUT: (429, "rate_limit_error"),
    ApiCode.BACKEND_UNAVAILABLE: (503, "server_error"),
    ApiCode.LIMITER_UNAVAILABLE: (503, "server_error"),
    ApiCode.USAGE_UNAVAILABLE: (503, "server_error"),
    ApiCode.UPSTREAM_TIMEOUT: (504, "server_error"),
    ApiCode.UPSTREAM_REPLY_TOO_LARGE: (502, "server_error"),
    ApiCode.UPSTREAM_EVENT_TOO_LARGE: (502, "server_error"),
    ApiCode.INTERNAL: (500, "server_error"),
}


class ApiError(Exception):
    def __init__(
        self,
        code: ApiCode,
        message: str,
        *,
        param: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def status(self) -> int:
        return API_STATUS[self.code][0]

    def body(self) -> bytes:
        return error_body(self.code, self.message, self.param)

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None:
            headers.append((b"retry-after", str(self.retry_after_s).encode()))
        return headers


def error_body(code: ApiCode, message: str, param: str | None = None) -> bytes:
    kind = API_STATUS[code][1]
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": str(code)}}
    )
