"""The largest rate limits anyone may set: far beyond a real fleet, and exact wherever they travel
(a BIGINT column, a JSON number, a double in the limiter's Lua script). Plain numbers, apart from
the spec models (`core.spec.rate_limits` checks them), so that `gpuplex keys create` can state its
options' ranges without loading those models."""

from __future__ import annotations

MAX_REQUESTS_PER_MIN = 10**9
MAX_TOKENS_PER_MIN = 10**12
MAX_CONCURRENT_REQUESTS = 10**6
