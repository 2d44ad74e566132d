"""The budget panel in a real chromium: what a budget enforces at the gateway (a platform block on
contoso shows as blocked), the window its projection follows, and spend per API key, where a
tenant-scoped viewer sees its own keys only."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from gpuplex.clock import utc_now
from gpuplex.core.spec import RateLimits
from gpuplex.store.db import open_store
from gpuplex.store.key_usage import KeyUsage, KeyUsageRepository
from gpuplex.store.keys import KeyRepository
from tests.e2e.dashboard.stack import Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

KEYS = {("contoso", "ci"): 1_000, ("contoso", "web"): 3_000, ("northwind", "prod"): 5_000}


def _api(stack: Stack, method: str, path: str, body: Any = None) -> Any:
    reply = httpx.request(
        method,
        f"{stack.base_url}/api/v1{path}",
        headers={"Authorization": f"Bearer {stack.admin_token}"},
        json=body,
        timeout=30,
    )
    assert reply.is_success, reply.text
    return reply.json()


@pytest.fixture(scope="module")
def shares(stack: Stack) -> dict[str, str]:
    """Three named keys with traffic, rolled up per key as the metering does; a platform block on
    contoso and on its key `ci`. Returns contoso's spend per key, as the API has it."""
    _seed_keys(stack)
    blocked = _api(stack, "PUT", "/tenants/contoso/budget", {"amount": "1", "action": "block"})
    assert blocked["enforced"] == "block", blocked  # the seeded day spent more than $1
    _api(stack, "PUT", "/tenants/contoso/key-budgets/ci", {"amount": "0.01", "action": "block"})
    spend = _api(stack, "GET", "/tenants/contoso/key-spend")
    return {k["name"]: k["spend"] for k in spend["keys"]}


def _seed_keys(stack: Stack) -> None:
    engine = open_store(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}")
    try:
        keys = KeyRepository(engine)
        now = utc_now()
        usage = {}
        for (tenant, name), tokens in KEYS.items():
            _, key = keys.create(tenant, name, [], None, RateLimits(), now, "test")
            usage[tenant, key.prefix] = KeyUsage(tokens // 100, tokens)
        start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
        if start.month != now.month:
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        KeyUsageRepository(engine).replace_window(start, start + timedelta(minutes=5), usage)
    finally:
        engine.dispose()


def _open(page: Page, token: str) -> None:
    page.goto(f"/dashboard/#token={token}")
    page.wait_for_selector("[data-testid=budget-row]")
    page.wait_for_selector("[data-testid=key-spend-row]")


def test_a_block_shows_on_the_budget_and_on_the_key_with_spend_per_key(
    page: Page, stack: Stack, shares: dict[str, str], page_errors: list[str]
) -> None:
    _open(page, stack.admin_token)
    contoso = page.locator("[data-testid=budget-row][data-tenant=contoso]")
    expect(contoso).to_have_attribute("data-enforced", "block")
    expect(contoso.locator("[data-testid=budget-enforced]")).to_have_text("blocked at the gateway")
    expect(contoso).to_contain_text("block at 100% · set by the platform")
    expect(contoso.locator("[data-testid=projection-window]")).to_contain_text(
        "projected at the run rate of"
    )

    rows = page.locator("[data-testid=key-spend-row]")
    expect(rows).to_have_count(3)
    ci = page.locator("[data-testid=key-spend-row][data-tenant=contoso][data-key=ci]")
    expect(ci).to_contain_text("1,000")  # tokens
    expect(ci).to_contain_text(f"${float(shares['ci']):,.2f}")
    expect(ci.locator("[data-testid=key-enforced]")).to_have_text("blocked")
    web = page.locator("[data-testid=key-spend-row][data-tenant=contoso][data-key=web]")
    expect(web).to_contain_text(f"${float(shares['web']):,.2f}")
    expect(web.locator("[data-testid=key-enforced]")).to_have_count(0)
    assert page_errors == []


def test_a_tenant_viewer_sees_only_its_own_keys(
    page: Page, stack: Stack, shares: dict[str, str], page_errors: list[str]
) -> None:
    _open(page, stack.contoso_token)
    rows = page.locator("[data-testid=key-spend-row]")
    expect(rows).to_have_count(2)
    tenants = set(rows.evaluate_all("els => els.map(e => e.dataset.tenant)"))
    assert tenants == {"contoso"}
    expect(page.locator("[data-testid=key-spend]")).not_to_contain_text("northwind")
    assert page_errors == []
