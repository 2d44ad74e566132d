"""The one list of error codes. Each code is a stable wire string that carries everything the
places that answer an error need: the HTTP status the APIs answer with, the exit code the CLI
ends with, and whether the same request, unchanged, can succeed later (`retryable`).

Both HTTP APIs take their codes from here: the control plane's REST API renders a code as
`{"error": {"code", "message", ...}}` (gpuplex/server/problems.py), the gateway's OpenAI-compatible
API as `{"error": {"message", "type", "param", "code"}}` (gpuplex/gateway/api_errors.py), and the
HTTP front door of both (gpuplex/http_guard.py) in the format of the server it guards. A member
cannot be declared without its status, exit code and retryability: the class refuses it.
"""

from __future__ import annotations

from enum import StrEnum

#: CLI exit code for a failure that is not the input's fault (a host, store or network problem).
EXIT_FAILED = 1
#: CLI exit code for input the user must fix (bad spec, bad plan file, unknown name).
EXIT_BAD_INPUT = 2
#: CLI exit codes for the Kubernetes API, so scripts can tell its failures apart.
EXIT_KUBE_UNREACHABLE = 3
EXIT_KUBE_FORBIDDEN = 4
EXIT_KUBE_RETRY_LATER = 5
#: As the shell reports a program ended by SIGINT.
EXIT_INTERRUPTED = 130

#: `retryable` values, named so the table below reads as a sentence.
RETRY = True
FINAL = False


class CodeWithAnswers(StrEnum):
    """A StrEnum whose every member is `"wire_string", status, exit_code, retryable`; a member
    without all four is a TypeError when the class is created."""

    status: int
    exit_code: int
    retryable: bool

    def __new__(cls, wire: str, status: int, exit_code: int, retryable: bool) -> CodeWithAnswers:
        if not 400 <= status <= 599:
            raise ValueError(f"error code {wire!r}: HTTP status {status} is not an error status")
        if not 1 <= exit_code <= 255:
            raise ValueError(f"error code {wire!r}: exit code {exit_code} is not in 1..255")
        member = str.__new__(cls, wire)
        member._value_ = wire
        member.status = status
        member.exit_code = exit_code
        member.retryable = retryable
        return member


class ErrorCode(CodeWithAnswers):
    """Every code gpuplex answers or exits with: wire string, HTTP status, exit code, retryable."""

    # Input the user must fix
    SPEC_INVALID = "spec_invalid", 422, EXIT_BAD_INPUT, FINAL
    PLAN_INVALID = "plan_invalid", 422, EXIT_BAD_INPUT, FINAL
    NOT_FOUND = "not_found", 404, EXIT_BAD_INPUT, FINAL
    METER_INPUT_INVALID = "meter_input_invalid", 422, EXIT_BAD_INPUT, FINAL
    STORE_VALUE_REFUSED = "store_value_refused", 422, EXIT_BAD_INPUT, FINAL
    GATEWAY_INVALID = "gateway_invalid", 500, EXIT_BAD_INPUT, FINAL
    KUBE_RENDER = "kube_render_refused", 422, EXIT_BAD_INPUT, FINAL
    DCGM_INPUT_INVALID = "dcgm_input_invalid", 502, EXIT_BAD_INPUT, FINAL
    TRACE_INVALID = "trace_invalid", 422, EXIT_BAD_INPUT, FINAL
    JOB_INVALID = "job_invalid", 422, EXIT_BAD_INPUT, FINAL
    EXTRA_MISSING = "extra_not_installed", 501, EXIT_BAD_INPUT, FINAL
    # The host runtime
    HOST_STATE = "host_state_invalid", 500, EXIT_FAILED, FINAL
    HOST_BUSY = "host_busy", 409, EXIT_FAILED, RETRY
    HOST_ACTION = "host_action_failed", 500, EXIT_FAILED, FINAL
    HOST_CGROUP = "host_cgroup_unavailable", 500, EXIT_FAILED, FINAL
    HOST_GPU_DRIVER = "host_gpu_driver", 500, EXIT_FAILED, FINAL
    INTERRUPTED = "interrupted", 503, EXIT_INTERRUPTED, FINAL
    # Shared state: the store and the rate limiter's Redis
    STORE_UNAVAILABLE = "store_unavailable", 503, EXIT_FAILED, RETRY
    SPEC_STALE = "spec_stale", 409, EXIT_FAILED, FINAL
    NO_QUEUES = "queues_not_configured", 409, EXIT_FAILED, FINAL
    JOB_STATE = "job_state_conflict", 409, EXIT_FAILED, FINAL
    TOO_MANY_JOBS = "too_many_jobs", 429, EXIT_FAILED, RETRY
    LIMITER_UNAVAILABLE = "limiter_unavailable", 503, EXIT_FAILED, RETRY
    # The Kubernetes API
    KUBE_API = "kube_api_failed", 502, EXIT_FAILED, FINAL
    KUBE_UNREACHABLE = "kube_unreachable", 503, EXIT_KUBE_UNREACHABLE, RETRY
    KUBE_FORBIDDEN = "kube_forbidden", 502, EXIT_KUBE_FORBIDDEN, FINAL
    KUBE_RETRY_LATER = "kube_retry_later", 503, EXIT_KUBE_RETRY_LATER, RETRY
    # Requests to either API
    UNAUTHENTICATED = "unauthenticated", 401, EXIT_FAILED, FINAL
    FORBIDDEN = "forbidden", 403, EXIT_FAILED, FINAL
    CSRF_REJECTED = "csrf_rejected", 403, EXIT_FAILED, FINAL
    INVALID_REQUEST = "invalid_request", 422, EXIT_BAD_INPUT, FINAL
    CONFLICT = "conflict", 409, EXIT_FAILED, FINAL
    METHOD_NOT_ALLOWED = "method_not_allowed", 405, EXIT_BAD_INPUT, FINAL
    REQUEST_TOO_LARGE = "request_too_large", 413, EXIT_BAD_INPUT, FINAL
    REQUEST_TIMEOUT = "request_timeout", 408, EXIT_FAILED, RETRY
    INTERNAL = "internal_error", 500, EXIT_FAILED, FINAL
    CONTROL_PLANE_UNREACHABLE = "control_plane_unreachable", 503, EXIT_FAILED, RETRY
    IDENTITY_PROVIDER_UNAVAILABLE = "identity_provider_unavailable", 503, EXIT_FAILED, RETRY
    TOO_MANY_SIGN_INS = "too_many_sign_ins", 429, EXIT_FAILED, RETRY
    # The gateway (OpenAI-compatible API)
    INVALID_JSON = "invalid_json", 400, EXIT_BAD_INPUT, FINAL
    INVALID_API_KEY = "invalid_api_key", 401, EXIT_FAILED, FINAL
    METRICS_TOKEN_REQUIRED = "metrics_token_required", 401, EXIT_FAILED, FINAL
    MODEL_NOT_FOUND = "model_not_found", 404, EXIT_BAD_INPUT, FINAL
    UNSUPPORTED_PARAMETER = "unsupported_parameter", 400, EXIT_BAD_INPUT, FINAL
    RATE_LIMITED = "rate_limit_exceeded", 429, EXIT_FAILED, RETRY
    BUDGET_EXCEEDED = "budget_exceeded", 402, EXIT_FAILED, FINAL
    BUDGET_THROTTLED = "budget_throttled", 429, EXIT_FAILED, RETRY
    TOO_MANY_FAILED_AUTH = "too_many_failed_auth", 429, EXIT_FAILED, RETRY
    QUEUE_FULL = "queue_full", 429, EXIT_FAILED, RETRY
    QUEUE_TIMEOUT = "queue_timeout", 429, EXIT_FAILED, RETRY
    OVER_LIMIT_ALWAYS = "request_exceeds_limit", 400, EXIT_BAD_INPUT, FINAL
    BACKEND_UNAVAILABLE = "backend_unavailable", 503, EXIT_FAILED, RETRY
    UPSTREAM_TIMEOUT = "upstream_timeout", 504, EXIT_FAILED, RETRY
    UPSTREAM_REPLY_TOO_LARGE = "upstream_reply_too_large", 502, EXIT_FAILED, FINAL
    UPSTREAM_EVENT_TOO_LARGE = "upstream_event_too_large", 502, EXIT_FAILED, FINAL
    USAGE_UNAVAILABLE = "usage_unavailable", 503, EXIT_FAILED, RETRY
    # The HTTP front door of both servers, before a request reaches the app
    REQUEST_LINE_TOO_LONG = "request_line_too_long", 414, EXIT_BAD_INPUT, FINAL
    HEADERS_TOO_LARGE = "headers_too_large", 431, EXIT_BAD_INPUT, FINAL
    TOO_MANY_HEADERS = "too_many_headers", 431, EXIT_BAD_INPUT, FINAL
    HEADER_TIMEOUT = "header_timeout", 408, EXIT_FAILED, RETRY
    TOO_MANY_CONNECTIONS = "too_many_connections", 503, EXIT_FAILED, RETRY
    INVALID_HTTP = "invalid_http", 400, EXIT_BAD_INPUT, FINAL
