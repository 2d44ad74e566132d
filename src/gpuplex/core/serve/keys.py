"""API key format and checks. A key is `gpx_<prefix>_<secret>`: the 8-character prefix is public
(it finds the stored row, and appears in lists, logs and usage records); the secret carries 256 bits
from the OS's random source. Only SHA-256 of the whole key is stored: a key is random, not a
password, so a slow hash would add latency without adding safety. Comparison is constant-time."""

from __future__ import annotations

import hashlib
import hmac
import re

KEY_SCHEME = "gpx"
PREFIX_CHARS = 8
_KEY = re.compile(r"^gpx_([0-9a-z]{8})_([A-Za-z0-9_-]{40,64})$")


def format_key(prefix: str, secret: str) -> str:
    return f"{KEY_SCHEME}_{prefix}_{secret}"


def key_prefix(token: str) -> str | None:
    """The public prefix of a well-formed key, else None (no lookup is made for garbage)."""
    match = _KEY.match(token)
    return match.group(1) if match else None


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def key_matches(stored_hash: str, token: str) -> bool:
    return hmac.compare_digest(stored_hash, key_hash(token))
