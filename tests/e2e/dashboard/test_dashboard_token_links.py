"""A `#token=` link in a tab that already uses a token (a pasted one, or an earlier link's): the
page asks before switching, names both tokens as the server reports them (as text), and keeps the
one in use unless told otherwise; a link with the same token, or where nobody is signed in, just
works. The link's token is never left in the address or in storage when it is not used."""

from __future__ import annotations

import pytest

from tests.e2e.dashboard.stack import ADMIN_NAME, Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

from tests.e2e.dashboard.token_links import (
    api_calls,
    calls_with_bearer,
    expect_prompt_names,
    expect_signed_in_as,
    record_requests,
    token_left_in_browser,
)

pytestmark = [pytest.mark.slow, pytest.mark.lane]

KEPT_IN_THE_TAB = "sessionStorage.getItem('gpuplex.token')"


def open_with_contoso_link(page: Page, stack: Stack) -> None:
    page.goto(f"/dashboard/#token={stack.contoso_token}")
    expect_signed_in_as(page, "contoso viewer", "tenant-viewer", "tenant contoso")
    expect(page.get_by_test_id("link-prompt")).to_be_hidden()
    assert page.evaluate("location.hash") == ""


def test_a_second_link_asks_and_escape_keeps_the_token_in_use(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    open_with_contoso_link(page, stack)
    page.goto("about:blank")  # the tab keeps its sessionStorage
    sent = record_requests(page)
    page.goto(f"{stack.base_url}/dashboard/#token={stack.admin_token}")
    prompt = page.get_by_test_id("link-prompt")
    expect(prompt).to_be_visible()
    expect_prompt_names(page, "current", "contoso viewer", "tenant-viewer", "tenant contoso")
    expect_prompt_names(page, "new", ADMIN_NAME, "platform-admin", "all tenants")
    assert prompt.locator("i").count() == 0  # the admin token's name carries markup
    expect(page.get_by_test_id("link-keep")).to_be_focused()
    assert page.evaluate(KEPT_IN_THE_TAB) == stack.contoso_token
    assert not token_left_in_browser(page, stack.admin_token)

    page.keyboard.press("Escape")
    expect(prompt).to_be_hidden()
    expect_signed_in_as(page, "contoso viewer", "tenant-viewer", "tenant contoso")
    page.wait_for_selector("body[data-loaded=true]")
    assert page.evaluate(KEPT_IN_THE_TAB) == stack.contoso_token
    assert not token_left_in_browser(page, stack.admin_token)
    assert calls_with_bearer(sent, stack.admin_token) == [("GET", "/api/v1/whoami")]
    assert len(calls_with_bearer(sent, stack.contoso_token)) == len(api_calls(sent)) - 1
    assert page_errors == []


def test_a_link_in_an_open_tab_asks_and_switch_uses_it(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    open_with_contoso_link(page, stack)
    # the same token again changes nothing; had it asked, the prompt would name it below
    page.evaluate(f"location.hash = 'token={stack.contoso_token}'")
    page.evaluate(f"location.hash = 'token={stack.admin_token}'")
    prompt = page.get_by_test_id("link-prompt")
    expect(prompt).to_be_visible()
    expect_prompt_names(page, "new", ADMIN_NAME, "platform-admin", "all tenants")
    assert page.evaluate("location.hash") == ""
    assert not token_left_in_browser(page, stack.admin_token)

    page.get_by_test_id("link-switch").click()
    expect(prompt).to_be_hidden()
    expect_signed_in_as(page, ADMIN_NAME, "platform-admin", "all tenants")
    assert page.evaluate(KEPT_IN_THE_TAB) == stack.admin_token
    assert page_errors == []


def test_a_link_whose_token_is_refused_changes_nothing(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    open_with_contoso_link(page, stack)
    refused = "gpt_00000000_not-a-real-secret"
    page.evaluate(f"location.hash = 'token={refused}'")
    expect(page.get_by_test_id("link-refused")).to_contain_text("not accepted")
    expect(page.get_by_test_id("link-switch")).to_be_hidden()
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("link-prompt")).to_be_hidden()
    expect_signed_in_as(page, "contoso viewer", "tenant-viewer", "tenant contoso")
    assert page.evaluate(KEPT_IN_THE_TAB) == stack.contoso_token
    assert not token_left_in_browser(page, refused)
    # the browser reports the refused request itself; nothing else may go wrong
    assert [e for e in page_errors if "401" not in e] == []
