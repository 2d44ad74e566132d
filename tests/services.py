"""The machine's real services for tests: PostgreSQL and Redis on loopback. Where one is missing the
test skips and says why, unless GPUPLEX_REQUIRE_SERVICES=1 (CI), where it fails instead."""

from __future__ import annotations

import os
import socket

import pytest

REDIS_URL = os.environ.get("GPUPLEX_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "GPUPLEX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def services_required() -> bool:
    return os.environ.get("GPUPLEX_REQUIRE_SERVICES") == "1"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def missing(what: str) -> None:
    message = f"{what} is not reachable on this machine"
    if services_required():
        pytest.fail(f"{message}, and GPUPLEX_REQUIRE_SERVICES=1 makes it mandatory")
    pytest.skip(message)


def redis_url_or_skip() -> str:
    if not _reachable("127.0.0.1", 6379):
        missing("Redis at 127.0.0.1:6379")
    return REDIS_URL


def postgres_url_or_skip() -> str:
    if not _reachable("127.0.0.1", 5432):
        missing("PostgreSQL at 127.0.0.1:5432")
    return POSTGRES_URL
