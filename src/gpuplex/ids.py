"""The one place that makes random ids and secrets. Everything else takes them as arguments."""

from __future__ import annotations

import secrets
import uuid


def new_request_id() -> str:
    """A unique id for one gateway request: 32 hex digits (a random UUID)."""
    return uuid.uuid4().hex  # noqa: TID251 - this is gpuplex.ids


def random_token(n_bytes: int) -> str:
    """A URL-safe random string carrying `n_bytes` bytes of entropy."""
    return secrets.token_urlsafe(n_bytes)


def random_hex(n_chars: int) -> str:
    """A random lowercase hex string of `n_chars` characters."""
    return secrets.token_hex((n_chars + 1) // 2)[:n_chars]
