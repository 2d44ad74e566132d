"""The client of the running control plane's REST API: one server URL (the CLI's `--server`, else
$GPUPLEX_SERVER_URL, else `gpuplex up`'s address: gpuplex.cli.control_plane_options), one bearer
token (`--token`, else $GPUPLEX_TOKEN, else the token `gpuplex login` kept:
gpuplex.client.oidc.saved_login), and its answers as values or errors. An error the API answers
keeps its code, so a command exits as the error model says (gpuplex/error_codes.py); a server that
cannot be reached is `control_plane_unreachable`."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from gpuplex.client.oidc.saved_login import saved_token
from gpuplex.clock import now_s
from gpuplex.errors import ControlPlaneUnreachable, ErrorCode, RequestRefused
from gpuplex.settings import SERVER_URL_VARIABLE, TOKEN_VARIABLE

#: How long one call may stall (connecting, or between reads) before the command gives up.
TIMEOUT_S = 30.0
#: The largest answer a command reads (a whole usage export is well under it).
MAX_ANSWER_BYTES = 256 * 1024 * 1024
API = "/api/v1"


@dataclass(frozen=True, slots=True)
class ControlPlane:
    """The API of one running control plane, called with one token."""

    base_url: str
    token: str

    @classmethod
    def of(cls, server: str, token: str | None) -> ControlPlane:
        token = token or saved_token(now_s())  # else the token of `gpuplex login`
        if not token:
            raise RequestRefused(
                ErrorCode.UNAUTHENTICATED,
                f"no token: give --token or set ${TOKEN_VARIABLE} (`gpuplex up` prints the admin "
                "token; `gpuplex token create` makes one), or sign in with `gpuplex login`",
            )
        parts = urllib.parse.urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RequestRefused(
                ErrorCode.INVALID_REQUEST,
                f"--server {server!r} is not an http(s) URL: write it as http://HOST:PORT",
            )
        return cls(server.rstrip("/"), token)

    def get_json(self, path: str, **query: str) -> Any:
        return json.loads(self._get(path, query))

    def get_text(self, path: str, **query: str) -> str:
        return self._get(path, query)

    def get_json_many(self, path: str, query: list[tuple[str, str]]) -> Any:
        """GET with a query that repeats a name (`?state=queued&state=running`)."""
        return json.loads(self._send(path, query, None))

    def post_json(self, path: str, body: Any = None) -> Any:
        """POST `body` as JSON (an empty object when None); the answer's JSON."""
        return json.loads(self._send(path, [], json.dumps(body or {}).encode("utf-8")))

    def _get(self, path: str, query: dict[str, str]) -> str:
        return self._send(path, list(query.items()), None)

    def _send(self, path: str, query: list[tuple[str, str]], body: bytes | None) -> str:
        from gpuplex.http_client import call  # aiohttp: only for a call

        url = f"{self.base_url}{API}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            answer = call(
                "GET" if body is None else "POST",
                url,
                headers=headers,
                body=body,
                timeout_s=TIMEOUT_S,
                max_bytes=MAX_ANSWER_BYTES,
                environment_proxy=True,  # as curl would, for a control plane behind a proxy
            )
        except OSError as error:
            raise ControlPlaneUnreachable(
                f"cannot reach the control plane at {self.base_url} ({_reason(error)}): is it "
                f"running? give --server or set ${SERVER_URL_VARIABLE}"
            ) from None
        if not answer.complete:
            raise ControlPlaneUnreachable(
                f"the control plane at {self.base_url} answered over {MAX_ANSWER_BYTES} bytes"
            )
        if answer.status >= 400:
            raise _refusal(answer.status, answer.body)
        return answer.body.decode("utf-8", errors="replace")


def _reason(error: OSError) -> str:
    """The cause without the URL the message starts with (the base URL is said already)."""
    said = str(error)
    return said.split(": ", 1)[1] if ": " in said else said


class ApiRefusal(RequestRefused):
    """The API's refusal with its whole error object (`field`, `problems`, ...), for a command
    that says more than the message."""

    def __init__(self, code: ErrorCode, message: str, detail: dict[str, Any]) -> None:
        super().__init__(code, message)
        self.detail = detail


def _refusal(status: int, answer: bytes) -> ApiRefusal:
    """The API's `{"error": {"code", "message"}}` as the same code; anything else by its status."""
    body = answer.decode("utf-8", errors="replace")
    detail: dict[str, Any] = {}
    try:
        detail = dict(json.loads(body)["error"])
        wire, message = str(detail["code"]), str(detail["message"])
    except (ValueError, KeyError, TypeError):
        wire, message = (
            "",
            f"the control plane answered {status}: {body[:200] or _status_phrase(status)}",
        )
    code = next((c for c in ErrorCode if c.value == wire), None)
    if code is None:
        code = next((c for c in ErrorCode if c.status == status), ErrorCode.INTERNAL)
    return ApiRefusal(code, message, detail)


def _status_phrase(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "no reason given"
