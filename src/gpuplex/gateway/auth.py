"""Who is calling: `Authorization: Bearer gpx_...` checked against the keys in the store.

Every worker keeps the active keys in memory, found by their public prefix and compared by hash in
constant time, and polls the store's key version every `refresh_s` (0.5 s): a revoked key stops
working on every worker within a second, and a store outage never fails requests with the keys
already loaded. Failed attempts are counted per client address; past the limit the address's
failed attempts get 429 instead of 401 until its window clears, while a valid key from the same
address always gets in (`core.serve.failed_auth`). The scheme is case-insensitive (RFC 7235).

The same refresh reads the budgets the control plane enforces now (`budget_enforcement`): a caller
whose tenant or key name is blocked carries the refusal, one whose budget throttles carries an
extra requests-per-minute limit, so admission costs one attribute check and nothing more.

A tenant's service account (the identity provider's token, gateway/service_accounts.py) is a caller
made by the same rule (`tenant_caller`): its tenant's limits and budget, every model of the tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.report.enforcement import BudgetAction, key_budget_name
from gpuplex.core.serve.failed_auth import FailedAttempts
from gpuplex.core.serve.keys import bearer_token, key_matches, key_prefix
from gpuplex.core.serve.limits import Limit, LimitKind, scope_limits
from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError
from gpuplex.retry import run_pass
from gpuplex.store.budget_enforcement import EnforcedBudget, EnforcementRepository
from gpuplex.store.keys import KeyRecord, KeyRepository

#: The scope of a throttled budget's limit starts with this (`budget:tenant:acme`).
BUDGET_SCOPE = "budget:"
#: Service accounts' callers kept between rebuilds at most (made again when dropped).
MAX_ACCOUNT_CALLERS = 10_000
Gates = Mapping[tuple[str, str], EnforcedBudget]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    key_prefix: str
    models: frozenset[str]  # empty: every model of the tenant
    expires_at_s: float | None
    limits: tuple[Limit, ...]
    budget_block: str | None = None  # why a blocked budget refuses this caller
    budget_throttle: str | None = None  # which budget throttles it (its limits hold the rate)

    @property
    def token_cap(self) -> int | None:
        """The smallest tokens-per-minute limit the caller is under: no request can use more."""
        caps = [limit.amount for limit in self.limits if limit.kind is LimitKind.TOKENS]
        return min(caps) if caps else None


def caller_of(
    record: KeyRecord, tenant_limits: Callable[[str], tuple[Limit, ...]], gates: Gates
) -> Caller:
    key = record.key
    return tenant_caller(
        key.tenant,
        key.prefix,
        tenant_limits,
        gates,
        budget_name=key_budget_name(key.name, key.prefix),
        models=frozenset(key.models),
        expires_at_s=key.expires_at.timestamp() if key.expires_at is not None else None,
        own_limits=scope_limits(f"key:{key.prefix}", key.limits),
    )


def tenant_caller(
    tenant: str,
    prefix: str,
    tenant_limits: Callable[[str], tuple[Limit, ...]],
    gates: Gates,
    *,
    budget_name: str | None = None,
    models: frozenset[str] = frozenset(),
    expires_at_s: float | None = None,
    own_limits: tuple[Limit, ...] = (),
) -> Caller:
    """A caller of `tenant` known as `prefix`: its own limits, then its tenant's, then those of a
    budget that throttles it; a blocked budget's refusal. The tenant's budget always counts; a
    key's budget (by `budget_name`) only where there is a name: a service account has none."""
    block = throttle = None
    budget_limits = []
    for gate in (
        gates.get((tenant, "")),
        gates.get((tenant, budget_name)) if budget_name else None,
    ):
        if gate is None:
            continue
        whose = f"API key {gate.key_name!r}" if gate.key_name else f"tenant {gate.tenant!r}"
        figures = (
            f"the {gate.period} budget of {whose} is {gate.budget} {gate.currency}; "
            f"{gate.spend} {gate.currency} spent"
        )
        if gate.action is BudgetAction.BLOCK and block is None:
            block = (
                f"{figures}. Requests are refused until the budget is raised or a new period begins"
            )
        elif gate.action is BudgetAction.THROTTLE:
            scope = f"{BUDGET_SCOPE}{'key' if gate.key_name else 'tenant'}:{tenant}/{gate.key_name}"
            budget_limits.append(Limit(scope, LimitKind.REQUESTS, gate.throttle_requests_per_min))
            throttle = (
                f"{figures}; throttled to {gate.throttle_requests_per_min} requests per minute "
                "until the budget is raised or a new period begins"
            )
    return Caller(
        tenant,
        prefix,
        models,
        expires_at_s,
        (*own_limits, *tenant_limits(tenant), *budget_limits),
        block,
        throttle,
    )


class KeyCache:
    def __init__(
        self,
        keys: KeyRepository,
        tenant_limits: Callable[[str], tuple[Limit, ...]],
        failed_auth_per_min: int,
        refresh_s: float = 0.5,
        enforcement: EnforcementRepository | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._keys = keys
        self._clock = clock
        self._enforcement = enforcement
        self._gates: dict[tuple[str, str], EnforcedBudget] = {}
        self._tenant_limits = tenant_limits
        self._refresh_s = refresh_s
        self._by_prefix: dict[str, tuple[str, Caller]] = {}
        #: (tenant, identity) -> the caller a service account of the tenant is; made on first use
        self._accounts: dict[tuple[str, str], Caller] = {}
        self._records: list[KeyRecord] = []
        self._version: str | None = None
        self._failures = FailedAttempts(failed_auth_per_min)

    def load(self) -> None:
        """Read the active keys now (blocking: before serving)."""
        if self._fetch():
            self.rebuild()

    def _fetch(self) -> bool:
        """Read the active keys if they changed since the last read, and the budgets enforced
        now; whether either changed."""
        gates_changed = False
        if self._enforcement is not None:
            gates = {gate.scope: gate for gate in self._enforcement.current()}
            gates_changed = gates != self._gates
            self._gates = gates
        version = self._keys.version()
        if version == self._version:
            return gates_changed
        self._records = self._keys.active_records(self._clock.utc_now())
        self._version = version
        return True

    def rebuild(self) -> None:
        """The callers again from the keys last read, with the tenants' limits as they are now
        (after a new revision changed them); reads nothing from the store. Called on the event
        loop only, so a rebuild never races another."""
        self._by_prefix = {
            r.key.prefix: (r.key_hash, caller_of(r, self._tenant_limits, self._gates))
            for r in self._records
        }
        self._accounts = {}

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

    def account_caller(self, tenant: str, identity: str) -> Caller:
        """The caller a tenant's service account is (gateway/service_accounts.py): every model
        of the tenant, the tenant's limits and budget, as they were at the last rebuild."""
        found = self._accounts.get((tenant, identity))
        if found is None:
            if len(self._accounts) >= MAX_ACCOUNT_CALLERS:
                self._accounts = {}
            found = tenant_caller(tenant, identity, self._tenant_limits, self._gates)
            self._accounts[(tenant, identity)] = found
        return found

    def authenticate(self, authorization: bytes | None, client: str) -> Caller:
        caller = self._match(authorization, self._clock.now_s())
        if caller is not None:
            return caller
        self.refuse(client)

    def refuse(self, client: str) -> NoReturn:
        """A failed check from `client`: counted, and 401 (429 past the address's limit)."""
        now = self._clock.monotonic_s()
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
