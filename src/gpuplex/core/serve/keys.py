"""API key format and checks. A key is `gpx_<prefix>_<secret>`: the 8-character prefix is public
(it finds the stored row, and appears in lists, logs and usage records); the secret carries 256 bits
from the OS's random source. Only SHA-256 of the whole key is stored: a key is random, not a
password, so a slow hash would add latency without adding safety. Comparison is constant-time.

The control plane's tokens (`gpt_<prefix>_<secret>`) have the same shape and checks under their own
scheme, so a gateway key is never taken for a control-plane token, nor the other way round."""

from __future__ import annotations

import hashlib
import hmac
import re

KEY_SCHEME = "gpx"
TOKEN_SCHEME = "gpt"  # noqa: S105 - control-plane tokens; a scheme name, not a secret
PREFIX_CHARS = 8
_SHAPES = {
    scheme: re.compile(rf"^{scheme}_([0-9a-z]{{8}})_([A-Za-z0-9_-]{{40,64}})$")
    for scheme in (KEY_SCHEME, TOKEN_SCHEME)
}


def format_key(prefix: str, secret: str, scheme: str = KEY_SCHEME) -> str:
    return f"{scheme}_{prefix}_{secret}"


def key_prefix(token: str, scheme: str = KEY_SCHEME) -> str | None:
    """The public prefix of a well-formed key, else None (no lookup is made for garbage)."""
    match = _SHAPES[scheme].match(token)
    return match.group(1) if match else None


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def key_matches(stored_hash: str, token: str) -> bool:
    return hmac.compare_digest(stored_hash, key_hash(token))


def bearer_token(authorization: str | bytes | None) -> str | None:
    """The credentials of an `Authorization: Bearer <token>` header, else None. The scheme is
    matched case-insensitively (RFC 7235); a header's bytes are read as Latin-1, as HTTP does."""
    if not authorization:
        return None
    text = authorization.decode("latin-1") if isinstance(authorization, bytes) else authorization
    scheme, _, credentials = text.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        return None
    return credentials
