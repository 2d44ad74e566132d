"""The metrics token: what the operator's Prometheus sends (`Authorization: Bearer <token>`) to read
`/metrics` on the gateway and on the control plane. Both name every tenant with its models and
usage, and tenant workloads may share the host's network, so a loopback address proves nothing:
without a token, /metrics answers only the networks the operator allowed explicitly (none by
default).

The token comes from $GPUPLEX_METRICS_TOKEN (`gpuplex up` makes one; on Kubernetes a Secret). A
process keeps only its SHA-256 and compares hashes in constant time; the control plane also takes a
platform-admin token. A token is at least `MIN_CHARS` characters: it guards every tenant's numbers.
"""

from __future__ import annotations

from gpuplex.core.serve.keys import bearer_token, key_hash, key_matches
from gpuplex.ids import random_token

MIN_CHARS = 16
#: `gpuplex up`'s tokens: a recognisable scheme and 256 random bits.
SCHEME = "gpm"


def metrics_token_sha256(token: str) -> str:
    """The hash a process keeps. ValueError (saying what to do) for a token too short to guard."""
    token = token.strip()
    if len(token) < MIN_CHARS:
        raise ValueError(
            f"the metrics token has {len(token)} characters; give at least {MIN_CHARS} random "
            "ones, e.g. `openssl rand -hex 32`"
        )
    return key_hash(token)


def new_metrics_token() -> str:
    return f"{SCHEME}_{random_token(32)}"


def presents_metrics_token(authorization: str, token_sha256: str | None) -> bool:
    """Whether the header carries the metrics token (never, when none is configured)."""
    credentials = bearer_token(authorization)
    if token_sha256 is None or credentials is None:
        return False
    return key_matches(token_sha256, credentials)
