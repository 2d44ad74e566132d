"""What a caller carries from the budgets the control plane enforces: a block's refusal with the
budget in it, or a throttle's extra requests-per-minute limit that the limiter refuses with 429
budget_throttled; the key's name (not its prefix) finds its budget, so a re-created key is held too."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from gpuplex.core.report.enforcement import BudgetAction
from gpuplex.core.serve.limits import Limit, LimitKind, Refused
from gpuplex.core.spec import RateLimits
from gpuplex.errors import ErrorCode
from gpuplex.gateway.auth import BUDGET_SCOPE, caller_of, tenant_caller
from gpuplex.gateway.proxy import _refusal
from gpuplex.store.budget_enforcement import EnforcedBudget
from gpuplex.store.keys import ApiKey, KeyRecord

T0 = datetime(2026, 3, 10, tzinfo=UTC)


def _record(name: str, prefix: str = "gpx_ab12") -> KeyRecord:
    key = ApiKey(prefix, "acme", name, (), T0, None, None, RateLimits())
    return KeyRecord(key, "hash")


def _gate(key_name: str, action: BudgetAction) -> EnforcedBudget:
    return EnforcedBudget(
        "acme", key_name, action, Decimal("12.50"), Decimal("10.00"), "USD", "2026-03", 6
    )


def no_tenant_limits(tenant: str) -> tuple[Limit, ...]:
    return ()


def test_no_budget_enforced_no_gate() -> None:
    caller = caller_of(_record("ci"), no_tenant_limits, {})
    assert (caller.budget_block, caller.budget_throttle, caller.limits) == (None, None, ())


def test_a_blocked_tenant_carries_the_refusal_with_its_budget() -> None:
    caller = caller_of(
        _record("ci"), no_tenant_limits, {("acme", ""): _gate("", BudgetAction.BLOCK)}
    )
    assert caller.budget_block is not None
    assert "tenant 'acme' is 10.00 USD; 12.50 USD spent" in caller.budget_block


def test_a_key_name_budget_holds_every_key_of_that_name_and_no_other() -> None:
    gates = {("acme", "ci"): _gate("ci", BudgetAction.BLOCK)}
    assert caller_of(_record("ci", "gpx_new1"), no_tenant_limits, gates).budget_block is not None
    assert caller_of(_record("web"), no_tenant_limits, gates).budget_block is None
    # a key without a name goes by its prefix
    unnamed = {("acme", "gpx_ab12"): _gate("gpx_ab12", BudgetAction.BLOCK)}
    assert caller_of(_record(""), no_tenant_limits, unnamed).budget_block is not None


def test_a_throttled_budget_adds_a_rate_that_is_refused_as_budget_throttled() -> None:
    gates = {("acme", "ci"): _gate("ci", BudgetAction.THROTTLE)}
    caller = caller_of(_record("ci"), no_tenant_limits, gates)
    assert caller.budget_block is None
    [limit] = caller.limits
    assert limit.scope.startswith(BUDGET_SCOPE)
    assert (limit.kind, limit.amount) == (LimitKind.REQUESTS, 6)
    error = _refusal(Refused(limit, 7.2), caller.budget_throttle)
    assert error.code is ErrorCode.BUDGET_THROTTLED
    assert error.status == 429
    assert "10.00 USD" in error.message
    assert "6 requests per minute" in error.message
    # a rate limit of the key's own is still rate_limit_exceeded
    own = Limit("key:gpx_ab12", LimitKind.REQUESTS, 60)
    assert _refusal(Refused(own, 1.0), caller.budget_throttle).code is ErrorCode.RATE_LIMITED


def test_a_service_account_is_held_by_its_tenants_budget_and_by_no_keys() -> None:
    gates = {
        ("acme", ""): _gate("", BudgetAction.THROTTLE),
        ("acme", "sa-0123456789abc"): _gate("sa-0123456789abc", BudgetAction.BLOCK),
    }
    caller = tenant_caller("acme", "sa-0123456789abc", no_tenant_limits, gates)
    assert caller.budget_block is None  # a key budget, even one named like it, is not its own
    assert caller.budget_throttle is not None
    [limit] = caller.limits
    assert limit.scope == f"{BUDGET_SCOPE}tenant:acme/"
    blocked = {("acme", ""): _gate("", BudgetAction.BLOCK)}
    assert tenant_caller("acme", "sa-x", no_tenant_limits, blocked).budget_block is not None
