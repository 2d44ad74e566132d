"""Rate limits: requests per minute, tokens per minute and requests in flight, the one type for them
wherever they are set or enforced: a tenant's `rate_limits` in gpuplex.yaml, a key's own limits in
the store, the REST API and the CLI, and the gateway's limiter (`core.serve.limits.scope_limits`).

The field names are the words on every wire: the YAML keys, the REST API's body fields, the CLI's
JSON, the store's columns, and the kinds in the limiter's Redis keys and script
(`core.serve.limits.LimitKind`).
"""

from __future__ import annotations

from pydantic import Field, StrictInt

from gpuplex.core.rate_limit_bounds import (
    MAX_CONCURRENT_REQUESTS,
    MAX_REQUESTS_PER_MIN,
    MAX_TOKENS_PER_MIN,
)
from gpuplex.core.spec.fields import SpecModel

__all__ = ["MAX_CONCURRENT_REQUESTS", "MAX_REQUESTS_PER_MIN", "MAX_TOKENS_PER_MIN", "RateLimits"]


class RateLimits(SpecModel):
    """Limits on one scope (a tenant, or one of its keys); None: no limit of that kind."""

    requests_per_min: StrictInt | None = Field(default=None, ge=1, le=MAX_REQUESTS_PER_MIN)
    tokens_per_min: StrictInt | None = Field(default=None, ge=1, le=MAX_TOKENS_PER_MIN)
    concurrent_requests: StrictInt | None = Field(default=None, ge=1, le=MAX_CONCURRENT_REQUESTS)
