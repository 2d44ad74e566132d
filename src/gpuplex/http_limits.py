"""What the front door of gpuplex's servers enforces (gpuplex/http_guard.py does the enforcing):
the limits, their defaults, the file limit they are fitted to, the codes and bodies of its
refusals, and the address a connection counts against. No uvicorn here, so the CLI and the specs'
users import it cheaply."""

from __future__ import annotations

import contextlib
import http
import ipaddress
import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson

from gpuplex.errors import ErrorCode

log = logging.getLogger(__name__)

#: File descriptors kept for everything but client connections (store, spool, logs, upstreams).
RESERVED_FDS = 256


#: The codes the front door refuses with (their statuses come with them, gpuplex/error_codes.py).
FRONT_DOOR_CODES: tuple[ErrorCode, ...] = (
    ErrorCode.REQUEST_LINE_TOO_LONG,
    ErrorCode.HEADERS_TOO_LARGE,
    ErrorCode.TOO_MANY_HEADERS,
    ErrorCode.HEADER_TIMEOUT,
    ErrorCode.TOO_MANY_CONNECTIONS,
    ErrorCode.INVALID_HTTP,
)

#: (code, message) -> the JSON error body, in the server's own format.
ErrorBody = Callable[[ErrorCode, str], bytes]


def plain_error_body(code: ErrorCode, message: str) -> bytes:
    """`{"error": {"code", "message"}}`: the control plane's problem format."""
    return orjson.dumps({"error": {"code": str(code), "message": message}})


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one server process accepts from its clients before a request reaches the app."""

    max_request_line_bytes: int = 8 * 1024
    max_header_bytes: int = 32 * 1024  # the request line and every header line together
    max_headers: int = 100
    header_timeout_s: float = 10.0
    keep_alive_timeout_s: int = 5
    max_connections: int = 4096
    max_connections_per_client: int = 512

    def __post_init__(self) -> None:
        if min(self.max_request_line_bytes, self.max_header_bytes, self.max_headers) < 1:
            raise ValueError("HTTP limits must be at least 1")
        if self.header_timeout_s <= 0 or self.keep_alive_timeout_s < 1:
            raise ValueError("HTTP timeouts must be positive")
        if not 1 <= self.max_connections_per_client <= self.max_connections:
            raise ValueError("max_connections_per_client must be between 1 and max_connections")


def raise_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it); the soft
    limit it ends with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fitted_to_file_limit(limits: HttpLimits, fds_per_connection: int) -> HttpLimits:
    """`limits` with `max_connections` lowered, where needed, to what the file limit allows
    (after raising the soft limit to the hard one), keeping `RESERVED_FDS` for everything else."""
    soft = raise_file_limit()
    if soft == resource.RLIM_INFINITY:
        return limits
    most = max(16, (soft - RESERVED_FDS) // fds_per_connection)
    if limits.max_connections <= most:
        return limits
    log.warning(
        "max_connections %d is over what the file limit (%d) allows; using %d",
        limits.max_connections,
        soft,
        most,
    )
    per_client = min(limits.max_connections_per_client, most)
    return replace(limits, max_connections=most, max_connections_per_client=per_client)


def client_key(client: tuple[str, int] | None) -> str:
    """The address a connection counts against: the IPv4 address, or an IPv6 address's /64."""
    if client is None:
        return ""  # a Unix socket: one local client
    host = client[0]
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return address.exploded[:19]  # the first four groups: the /64


def reply_bytes(error_body: ErrorBody, code: ErrorCode, message: str) -> bytes:
    status = code.status
    body = error_body(code, message)
    phrase = http.HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
