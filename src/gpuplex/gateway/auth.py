"""Who is calling: `Authorization: Bearer gpx_...` checked against the keys in the store.

Every worker keeps the active keys in memory, found by their public prefix and compared by hash in
constant time, and polls the store's key version every `refresh_s` (0.5 s): a revoked key stops
working on every worker within a second, and a store outage never fails requests with the keys
already loaded. Failed attempts are counted per client address; past the limit the address's
failed attempts get 429 instead of 401 until its window clears, while a valid key from the same
address always gets in (`core.serve.failed_auth`). The scheme is case-insensitive (RFC 7235).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from gpuplex.clock import monotonic_s, now_s, utc_now
from gpuplex.core.serve.failed_auth import FailedAttempts
from gpuplex.core.serve.keys import bearer_token, key_matches, key_prefix
from gpuplex.core.serve.limits import Limit, LimitKind, scope_limits
from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError
from gpuplex.retry import run_pass
from gpuplex.store.keys import KeyRecord, KeyRepository

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    key_prefix: str
    models: frozenset[str]  # empty: every model of the tenant
    expires_at_s: float | None
    limits: tuple[Limit, ...]

    @property
    def token_cap(self) -> int | None:
        """The smallest tokens-per-minute limit the caller is under: no request can use more."""
        caps = [limit.amount for limit in self.limits if limit.kind is LimitKind.TOKENS]
        return min(caps) if caps else None


def caller_of(record: KeyRecord, tenant_limits: Callable[[str], tuple[Limit, ...]]) -> Caller:
    key = record.key
    own = scope_limits(f"key:{key.prefix}", key.limits)
    expires = key.expires_at.timestamp() if key.expires_at is not None else None
    return Caller(
        key.tenant, key.prefix, frozenset(key.models), expires, (*own, *tenant_limits(key.tenant))
    )


class KeyCache:
    def __init__(
        self,
        keys: KeyRepository,
        tenant_limits: Callable[[str], tuple[Limit, ...]],
        failed_auth_per_min: int,
        refresh_s: float = 0.5,
    ) -> None:
        self._keys = keys
        self._tenant_limits = tenant_limits
        self._refresh_s = refresh_s
        self._by_prefix: dict[str, tuple[str, Caller]] = {}
        self._records: list[KeyRecord] = []
        self._version: str | None = None
        self._failures = FailedAttempts(failed_auth_per_min)

    def load(self) -> None:
        """Read the active keys now (blocking: before serving)."""
        if self._fetch():
            self.rebuild()

    def _fetch(self) -> bool:
        """Read the active keys if they changed since the last read; whether they did."""
        version = self._keys.version()
        if version == self._version:
            return False
        self._records = self._keys.active_records(utc_now())
        self._version = version
        return True

    def rebuild(self) -> None:
        """The callers again from the keys last read, with the tenants' limits as they are now
        (after a new revision changed them); reads nothing from the store. Called on the event
        loop only, so a rebuild never races another."""
        self._by_prefix = {
            r.key.prefix: (r.key_hash, caller_of(r, self._tenant_limits)) for r in self._records
        }

    def _refresh(self) -> bool | None:
        """`_fetch` as a background pass: whether the keys changed; None when it failed (logged)."""
        job = "refreshing the API keys from the store"
        return run_pass(self._fetch, job=job, retry_in_s=self._refresh_s, log=log)

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            # a store outage must not stop serving the keys known already
            if await loop.run_in_executor(None, self._refresh):
                self.rebuild()  # here, on the loop: never racing a rebuild for a new revision
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._refresh_s)

    def authenticate(self, authorization: bytes | None, client: str) -> Caller:
        caller = self._match(authorization, now_s())
        if caller is not None:
            return caller
        now = monotonic_s()
        if self._failures.throttled(client, now):
            raise ApiError(
                ErrorCode.TOO_MANY_FAILED_AUTH,
                "too many failed API key checks from this address; wait a minute",
                retry_after_s=60,
            )
        self._failures.record(client, now)
        raise ApiError(ErrorCode.INVALID_API_KEY, "invalid API key")

    def _match(self, authorization: bytes | None, now: float) -> Caller | None:
        token = bearer_token(authorization)
        if token is None:
            return None
        prefix = key_prefix(token)
        found = self._by_prefix.get(prefix) if prefix else None
        if found is None or not key_matches(found[0], token):
            return None
        caller = found[1]
        if caller.expires_at_s is not None and caller.expires_at_s <= now:
            return None
        return caller
