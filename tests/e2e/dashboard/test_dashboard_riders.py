"""The dashboard in a real chromium shows a tenant that rides on another tenant's model server: adatum's
LoRA adapter runs in contoso's support-bot server, so adatum is on the GPU-map legend with the server
it rides on and its share of that server's tokens, marked on the server's slices, and the tenants
table says where it rides instead of only `0 placed`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.dashboard.seed import RIDER_TOKENS
from tests.e2e.dashboard.stack import Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

SERVER = "contoso/support-bot"


def _nodes(page: Page, stack: Stack) -> Any:
    reply = page.request.get(
        f"{stack.base_url}/api/v1/nodes", headers={"Authorization": f"Bearer {stack.admin_token}"}
    )
    assert reply.ok, reply.text()
    return reply.json()


def test_a_rider_is_on_the_map_and_the_legend_with_its_share(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    page.goto(f"/dashboard/#token={stack.admin_token}")
    page.wait_for_selector("[data-testid=gpu-slice]")

    # the API's share: adatum sent a quarter of the server's tokens in the seeded day
    occupants = [
        o
        for node in _nodes(page, stack)["nodes"]
        for gpu in node["gpus"]
        for o in gpu["occupants"]
        if f"{o['tenant']}/{o['workload']}" == SERVER
    ]
    assert len(occupants) == 2
    adatum_tokens = RIDER_TOKENS["adatum", "adatum-legal"]
    expected_share = adatum_tokens / sum(RIDER_TOKENS.values())
    for occupant in occupants:
        [rider] = occupant["riders"]
        assert rider["tenant"] == "adatum"
        assert rider["token_share"] == pytest.approx(expected_share)

    # on the legend, with the server it rides on and its share
    entry = page.locator("[data-testid=gpu-legend] li[data-tenant=adatum]")
    expect(entry).to_have_count(1)
    expect(entry).to_have_attribute("data-rider", SERVER)
    expect(entry).to_contain_text(f"rides on {SERVER}")
    expect(entry).to_contain_text(f"{round(expected_share * 100)}% of its tokens in 24 h")

    # a mark in adatum's colour on each of the server's slices, said in the slice's tooltip too
    marks = page.locator(
        "[data-testid=gpu-slice][data-tenant=contoso][data-workload=support-bot] "
        "[data-testid=gpu-rider][data-tenant=adatum]"
    )
    expect(marks).to_have_count(2)
    host = page.locator("[data-testid=gpu-slice][data-tenant=contoso][data-workload=support-bot]")
    assert "rider adatum (LoRA adatum-legal)" in (host.first.get_attribute("title") or "")
    colours = marks.evaluate_all("ms => ms.map(m => getComputedStyle(m).backgroundColor)")
    swatch = entry.locator(".swatch").evaluate("s => getComputedStyle(s).backgroundColor")
    assert set(colours) == {swatch}

    # the tenants table says where adatum's replicas are: riding on contoso's server
    row = page.locator("[data-testid=tenant-row][data-tenant=adatum]")
    expect(row.get_by_test_id("tenant-rides-on")).to_have_text(f"rides on {SERVER}")
    assert page_errors == []
