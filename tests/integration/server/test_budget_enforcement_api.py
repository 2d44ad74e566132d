"""Budgets that enforce, through the API: who may set and lift them, spend per API key (a tenant
sees only its own keys), key-name budgets, and every change of what is enforced in the audit log."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec import RateLimits
from gpuplex.server.budget_enforcement import enforce_budgets
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, Api, error_of
from tests.integration.server.test_usage_api import HOUR, roll_up

BLOCK_AT_1 = {"amount": "1", "action": "block", "soft_percent": 50, "soft_action": "throttle"}


def _spend_an_hour(api: Api) -> None:
    """A spends 1.80 in the first hour (half a GPU at 3.60), rolled up."""
    api.clock.advance(2 * HOUR)
    roll_up(api, timedelta(0), HOUR)
    applied = api.ctx.current.get()
    assert applied is not None
    enforce_budgets(api.ctx.budget_books, applied, api.clock.utc_now())


def _budget(api: Api, caller: str = "admin") -> dict[str, object]:
    reply = api.get(f"/tenants/{TENANT_A}/budget", caller)
    assert reply.status_code == 200, reply.text
    body: dict[str, object] = reply.json()
    return body


def test_a_block_budget_is_enforced_and_a_raised_one_lifts_it_at_once(api: Api) -> None:
    assert api.put(f"/tenants/{TENANT_A}/budget", json=BLOCK_AT_1).status_code == 200
    _spend_an_hour(api)
    budget = _budget(api)
    assert (budget["action"], budget["enforced"], budget["locked"]) == ("block", "block", True)
    assert [e.action for e in api.ctx.enforcement.current()] == ["block"]

    raised = api.put(f"/tenants/{TENANT_A}/budget", json={**BLOCK_AT_1, "amount": "3"})
    assert raised.status_code == 200, raised.text
    assert raised.json()["enforced"] == "throttle"  # 1.80 of 3: past the soft 50 %
    raised = api.put(f"/tenants/{TENANT_A}/budget", json={**BLOCK_AT_1, "amount": "4"})
    assert raised.json()["enforced"] == "alert"  # nothing enforced any more
    assert api.ctx.enforcement.current() == []
    audit = api.get("/audit", params={"tenant": TENANT_A}).json()["items"]
    actions = [e["action"] for e in audit]
    assert actions.count("budget.enforce") == 2  # block, then throttle
    assert actions.count("budget.lift") == 1


def test_a_tenant_admin_cannot_lift_a_block_a_platform_admin_set(api: Api) -> None:
    assert api.put(f"/tenants/{TENANT_A}/budget", json=BLOCK_AT_1).status_code == 200
    _spend_an_hour(api)
    for attempt in (
        api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={**BLOCK_AT_1, "amount": "999"}),
        api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={"amount": "1"}),  # alert only
        api.delete(f"/tenants/{TENANT_A}/budget", "a-admin"),
    ):
        assert attempt.status_code == 403, attempt.text
        assert error_of(attempt)["code"] == "forbidden"
    assert _budget(api)["enforced"] == "block"
    # a platform admin may
    assert api.delete(f"/tenants/{TENANT_A}/budget").status_code == 200
    assert api.ctx.enforcement.current() == []


def test_a_tenant_admin_may_set_and_lift_a_block_of_its_own(api: Api) -> None:
    own = api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json=BLOCK_AT_1)
    assert own.status_code == 200, own.text
    assert own.json()["locked"] is False
    _spend_an_hour(api)
    assert _budget(api, "a-admin")["enforced"] == "block"
    lifted = api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={"amount": "10"})
    assert lifted.status_code == 200
    assert lifted.json()["enforced"] == "alert"


def test_a_soft_action_stronger_than_the_action_is_refused(api: Api) -> None:
    body = {"amount": "1", "action": "throttle", "soft_percent": 50, "soft_action": "block"}
    reply = api.put(f"/tenants/{TENANT_A}/budget", json=body)
    assert reply.status_code == 422, reply.text


def _keys_with_traffic(api: Api) -> dict[str, str]:
    """Two named keys of A and one of B, with 100 and 300 tokens for A's and 50 for B's."""
    prefixes = {}
    for tenant, name in ((TENANT_A, "ci"), (TENANT_A, "web"), (TENANT_B, "etl")):
        _, key = api.ctx.keys.create(tenant, name, [], None, RateLimits(), T0, "suite")
        prefixes[name] = key.prefix
    records = [
        UsageRecord(
            f"r-{name}",
            tenant,
            prefixes[name],
            "m",
            "chat.completions",
            200,
            t,
            0,
            0.1,
            T0 + timedelta(minutes=5),
        )
        for tenant, name, t in (
            (TENANT_A, "ci", 100),
            (TENANT_A, "web", 300),
            (TENANT_B, "etl", 50),
        )
    ]
    api.ctx.usage.insert_many(records)
    return prefixes


def test_spend_per_key_shares_the_tenants_spend_by_tokens(api: Api) -> None:
    prefixes = _keys_with_traffic(api)
    _spend_an_hour(api)
    reply = api.get(f"/tenants/{TENANT_A}/key-spend", "a-viewer")
    assert reply.status_code == 200, reply.text
    page = reply.json()
    keys = {k["name"]: k for k in page["keys"]}
    assert set(keys) == {"ci", "web"}  # B's key is not A's business
    assert (keys["ci"]["tokens"], keys["ci"]["requests"]) == (100, 1)
    assert keys["ci"]["prefixes"] == [prefixes["ci"]]
    assert (Decimal(keys["ci"]["spend"]), Decimal(keys["web"]["spend"])) == (
        Decimal("0.45"),
        Decimal("1.35"),
    )
    assert Decimal(page["tenant_spend"]) == Decimal("1.80")


def test_a_tenant_reads_and_budgets_only_its_own_keys(api: Api) -> None:
    """Another tenant's keys do not exist for a tenant (404, as every tenant resource); a viewer
    reads but does not set."""
    _keys_with_traffic(api)
    assert api.get(f"/tenants/{TENANT_B}/key-spend", "a-admin").status_code == 404
    put = api.put(f"/tenants/{TENANT_B}/key-budgets/etl", "a-admin", json={"amount": "1"})
    assert put.status_code == 404
    assert api.ctx.budgets.get(TENANT_B, "etl") is None
    viewer = api.put(f"/tenants/{TENANT_A}/key-budgets/ci", "a-viewer", json={"amount": "1"})
    assert viewer.status_code == 403
    assert api.get(f"/tenants/{TENANT_A}/key-spend", "a-viewer").status_code == 200


def test_a_key_name_budget_blocks_that_name_only_and_is_audited(api: Api) -> None:
    _keys_with_traffic(api)
    reply = api.put(
        f"/tenants/{TENANT_A}/key-budgets/ci", json={"amount": "0.40", "action": "block"}
    )
    assert reply.status_code == 200, reply.text
    assert (reply.json()["key_name"], reply.json()["locked"]) == ("ci", True)
    _spend_an_hour(api)  # ci's share: 0.45 of 0.40
    enforced = {(e.tenant, e.key_name): e.action.value for e in api.ctx.enforcement.current()}
    assert enforced == {(TENANT_A, "ci"): "block"}
    page = api.get(f"/tenants/{TENANT_A}/key-spend").json()
    ci = next(k for k in page["keys"] if k["name"] == "ci")
    assert ci["budget"]["enforced"] == "block"
    # the tenant admin cannot lift the platform's block on its key
    lift = api.put(f"/tenants/{TENANT_A}/key-budgets/ci", "a-admin", json={"amount": "100"})
    assert lift.status_code == 403
    assert api.delete(f"/tenants/{TENANT_A}/key-budgets/ci", "a-admin").status_code == 403
    raised = api.put(f"/tenants/{TENANT_A}/key-budgets/ci", json={"amount": "1", "action": "block"})
    assert raised.json()["enforced"] == "alert"
    assert api.delete(f"/tenants/{TENANT_A}/key-budgets/ci").status_code == 200
    assert api.delete(f"/tenants/{TENANT_A}/key-budgets/ci").status_code == 404
    targets = {
        (e["action"], e["target"])
        for e in api.get("/audit", params={"tenant": TENANT_A}).json()["items"]
    }
    assert ("budget.set", f"budget:{TENANT_A}/key:ci") in targets
    assert ("budget.enforce", f"budget:{TENANT_A}/key:ci") in targets
    assert ("budget.lift", f"budget:{TENANT_A}/key:ci") in targets
    assert ("budget.delete", f"budget:{TENANT_A}/key:ci") in targets
