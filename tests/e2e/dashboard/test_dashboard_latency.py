"""The latency panel in a real chromium: per tenant and model, the queue wait, time to first token
and inter-token latency (p50 · p95) of the last hour's requests, from the gateway's usage records
(seed.seed_latency); a tenant-scoped user sees its own rows only. The admin's panel is saved as
test-artifacts/dashboard-latency.png."""

from __future__ import annotations

import pytest

from gpuplex.clock import utc_now
from tests.e2e.dashboard.seed import LATENCY_TRAFFIC, seed_latency
from tests.e2e.dashboard.stack import ROOT, Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

ROW = "[data-testid=latency-row]"


@pytest.fixture(scope="module", autouse=True)
def latency_records(stack: Stack) -> None:
    seed_latency(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}", utc_now())


def _open(page: Page, token: str) -> None:
    page.goto(f"/dashboard/#token={token}")
    page.wait_for_selector(ROW)


def test_admin_sees_ttft_and_itl_next_to_queue_wait(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    _open(page, stack.admin_token)
    rows = page.locator(ROW)
    shown = rows.evaluate_all("rs => rs.map(r => [r.dataset.tenant, r.dataset.model])")
    assert sorted(map(tuple, shown)) == sorted(
        (tenant, model) for tenant, (model, _) in LATENCY_TRAFFIC.items()
    )
    contoso = page.locator(f"{ROW}[data-tenant=contoso]")
    # 40 streams and one whole reply: request k waited k ms, its first token came after
    # 100 + 10 k ms and its tokens every 20 + k ms (nearest-rank percentiles over requests)
    expect(contoso.locator("td").nth(2)).to_have_text("41")
    expect(contoso.locator("[data-metric=queue-wait]")).to_have_text("20 ms · 38 ms")
    expect(contoso.locator("[data-metric=ttft]")).to_have_text("290 ms · 470 ms")
    expect(contoso.locator("[data-metric=itl]")).to_have_text("39 ms · 57 ms")
    headers = page.locator("[data-testid=latency-table] th").all_text_contents()
    assert headers[3:] == [
        "Queue wait p50 · p95",
        "Time to first token p50 · p95",
        "Inter-token latency p50 · p95",
    ]
    (ROOT / "test-artifacts").mkdir(exist_ok=True)
    panel = page.locator("section", has=page.locator("#latency-title"))
    panel.screenshot(path=str(ROOT / "test-artifacts" / "dashboard-latency.png"))
    assert page_errors == []


def test_a_tenant_viewer_sees_only_its_own_latency(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    _open(page, stack.contoso_token)
    tenants = page.locator(ROW).evaluate_all("rs => rs.map(r => r.dataset.tenant)")
    assert tenants == ["contoso"]
    expect(page.locator(f"{ROW} [data-metric=ttft]")).to_have_text("290 ms · 470 ms")
    reply = page.request.get(
        f"{stack.base_url}/api/v1/tenants/northwind/latency",
        headers={"Authorization": f"Bearer {stack.contoso_token}"},
    )
    assert reply.status == 404  # as for every other tenant path: not even its existence
    assert page_errors == []
