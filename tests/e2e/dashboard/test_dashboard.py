"""The dashboard in a real chromium against a real control plane: the GPU map draws the plan's
MIG slices, MPS shares and whole GPUs in each tenant's place; a tenant-scoped user sees nothing of
other tenants; text from the API is never parsed as HTML; the page logs no errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuplex.clock import utc_now
from gpuplex.store.db import open_store
from tests.e2e.dashboard.seed import host_event
from tests.e2e.dashboard.stack import ADMIN_NAME, ROOT, Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

TENANTS = {"northwind", "contoso", "fabrikam", "adatum", "hobbyists"}
ARTIFACTS = ROOT / "test-artifacts"
SLICE = "[data-testid=gpu-slice]"


def _api(page: Page, stack: Stack, path: str, token: str) -> Any:
    reply = page.request.get(
        f"{stack.base_url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"}
    )
    assert reply.ok, reply.text()
    return reply.json()


def _slices(page: Page) -> list[dict[str, str]]:
    found: list[dict[str, str]] = page.eval_on_selector_all(
        SLICE,
        """els => els.map(e => ({
            gpu: e.closest('[data-testid=gpu]').dataset.gpuIndex,
            tenant: e.dataset.tenant, workload: e.dataset.workload, replica: e.dataset.replica,
            kind: e.dataset.kind, profile: e.dataset.migProfile || '', title: e.title}))""",
    )
    return found


def _planned(nodes: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {
        (str(gpu["index"]), o["tenant"], o["workload"], str(o["replica"]))
        for node in nodes["nodes"]
        for gpu in node["gpus"]
        for o in gpu["occupants"]
    }


def _screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / f"dashboard-{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)
    return shot


def _open_signed_in(page: Page, token: str) -> None:
    page.goto(f"/dashboard/#token={token}")
    page.wait_for_selector(SLICE)
    page.wait_for_selector("[data-testid=usage-card]")
    page.wait_for_selector("[data-testid=budget-row]")


def test_admin_sees_every_tenant_on_the_gpu_map(
    page: Page, stack: Stack, tmp_path: Path, page_errors: list[str]
) -> None:
    _open_signed_in(page, stack.admin_token)

    # the token left the address bar for the tab's session storage
    assert "token" not in page.url
    assert page.evaluate("sessionStorage.getItem('gpuplex.token')") == stack.admin_token
    # who am I: the name is shown as text, its markup never parsed
    expect(page.get_by_test_id("whoami-name")).to_have_text(ADMIN_NAME)
    expect(page.get_by_test_id("whoami-role")).to_have_text("platform-admin")
    assert page.locator("[data-testid=whoami] i").count() == 0

    # every occupant of the plan is drawn once, on its GPU, as the right kind of slice
    slices = _slices(page)
    nodes = _api(page, stack, "/nodes", stack.admin_token)
    drawn = {(s["gpu"], s["tenant"], s["workload"], s["replica"]) for s in slices}
    assert drawn == _planned(nodes)
    assert len(slices) == len(drawn)
    contoso_mig = [s for s in slices if s["tenant"] == "contoso" and s["profile"] == "3g.40gb"]
    assert len(contoso_mig) == 2
    assert {s["kind"] for s in contoso_mig} == {"mig"}
    hobbyists = [s for s in slices if s["tenant"] == "hobbyists"]
    assert len(hobbyists) == 4
    assert {s["kind"] for s in hobbyists} == {"mps"}
    assert {s["kind"] for s in slices if s["tenant"] == "northwind"} == {"dedicated"}
    assert "memory planned 39.4 GiB" in contoso_mig[0]["title"]
    assert "memory used" in contoso_mig[0]["title"]

    # a MIG slice sits at its memory slots: slot 4 of 8 starts half way along the track
    second_half = page.locator(f"{SLICE}[data-tenant=contoso][data-mig-profile='3g.40gb']").nth(1)
    track = second_half.locator("xpath=..")
    slice_box, track_box = second_half.bounding_box(), track.bounding_box()
    assert slice_box is not None
    assert track_box is not None
    assert slice_box["x"] - track_box["x"] == pytest.approx(track_box["width"] / 2, abs=1.5)
    assert slice_box["width"] == pytest.approx(track_box["width"] / 2, abs=1.5)

    # the tenants table, usage, budgets: every tenant
    rows = page.locator("[data-testid=tenant-row]")
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.tenant)")) == TENANTS
    cards = page.locator("[data-testid=usage-card]")
    assert set(cards.evaluate_all("cs => cs.map(c => c.dataset.tenant)")) == TENANTS
    contoso_card = page.locator("[data-testid=usage-card][data-tenant=contoso]")
    assert contoso_card.locator("svg rect").count() >= 24  # allocation bars of the seeded day
    assert contoso_card.locator("svg polyline").count() == 1  # busy GPU-hours
    contoso_budget = page.locator("[data-testid=budget-row][data-tenant=contoso]")
    expect(contoso_budget).to_contain_text("of $9,000.00")
    assert contoso_budget.locator(".threshold").count() == 3

    # host events: the preemption, the restart and the watchdog stop
    events = page.locator("[data-testid=event-row]")
    kinds = set(events.evaluate_all("rs => rs.map(r => r.dataset.kind)"))
    assert {"stopped", "started", "vram_exceeded", "spec.apply"} <= kinds

    shot = _screenshot(page, tmp_path, "admin")
    assert shot.stat().st_size > 10_000
    assert page_errors == []


def test_tenant_viewer_sees_only_their_own_tenant(
    page: Page, stack: Stack, tmp_path: Path, page_errors: list[str]
) -> None:
    page.goto("/dashboard/")
    page.get_by_test_id("token-input").fill(stack.contoso_token)
    page.get_by_test_id("signin-submit").click()
    page.wait_for_selector(SLICE)
    page.wait_for_selector("[data-testid=event-row]")
    page.wait_for_selector("[data-testid=budget-row]")

    expect(page.get_by_test_id("whoami-role")).to_have_text("tenant-viewer")
    expect(page.get_by_test_id("whoami-tenant")).to_have_text("tenant contoso")
    slices = _slices(page)
    assert {s["tenant"] for s in slices} == {"contoso"}
    assert len(slices) == 4  # two 3g.40gb and two 1g.10gb slices
    for testid in ("tenant-row", "usage-card", "budget-row"):
        tenants = page.locator(f"[data-testid={testid}]").evaluate_all(
            "rs => rs.map(r => r.dataset.tenant)"
        )
        assert tenants == ["contoso"], testid
    text = page.locator("body").inner_text()
    html = page.content()
    for other in TENANTS - {"contoso"}:
        assert other not in text, other
        assert other not in html, other
    _screenshot(page, tmp_path, "contoso")

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_test_id("signin")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('gpuplex.token')") is None
    assert page_errors == []


def test_a_bad_token_is_refused_at_sign_in(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    page.goto("/dashboard/#token=gpt_00000000_not-a-real-secret")
    error = page.get_by_test_id("signin-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("not accepted")
    expect(page.locator("#dashboard")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('gpuplex.token')") is None
    # the browser reports the refused request itself; nothing else may go wrong
    assert [e for e in page_errors if "401" not in e] == []
    assert json.dumps(page_errors).count("401") <= 1


def test_the_page_refreshes_and_shows_markup_as_text(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    _open_signed_in(page, stack.admin_token)
    hostile = '<img src="x" onerror="window.__pwned = 1">restarted'
    engine = open_store(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}")
    try:
        host_event(engine, utc_now(), "restarted", "contoso/embed#1", hostile)
    finally:
        engine.dispose()
    # the next refresh (every 10 s) brings the new event in, as text
    row = page.locator("[data-testid=event-row][data-kind=restarted]")
    expect(row).to_contain_text(hostile, timeout=25_000)
    assert row.locator("img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert page_errors == []
