"""The HTTP servers the gateway can run on (gateway/serve.py runs them). On its own, so that
`gpuplex gateway --help` can list them without loading the gateway."""

from __future__ import annotations

from enum import StrEnum


class HttpServer(StrEnum):
    GRANIAN = "granian"
    UVICORN = "uvicorn"
