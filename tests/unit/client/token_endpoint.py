"""A token endpoint on loopback for the client flows' tests: it answers each POST with the next
scripted answer, whatever it is (a provider's JSON, a proxy's HTML page), and keeps what was sent."""

from __future__ import annotations

import json
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TokenEndpoint:
    """Answers each POST with the next scripted (status, content type, body); keeps the forms."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str, bytes]] = []
        self.forms: list[dict[str, str]] = []
        self.authorizations: list[str | None] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                form = urllib.parse.parse_qsl(self.rfile.read(size).decode())
                endpoint.forms.append(dict(form))
                endpoint.authorizations.append(self.headers.get("authorization"))
                status, kind, body = endpoint.answers.pop(0)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def answer_json(self, status: int, body: dict[str, Any]) -> None:
        self.answers.append((status, "application/json", json.dumps(body).encode()))
