"""Signing in to the dashboard with the identity provider, in Chromium, the whole redirect dance:
the sign-in card offers the provider, the provider's own pages take the person's name and consent,
and the dashboard comes back signed in. A member of `gpu-contoso-viewers` sees contoso only; a
platform admin sees every tenant; after signing out, the session cookie (taken from the browser
beforehand) no longer works. The token links keep working beside it (tests/e2e/dashboard), but a
link never switches a signed-in person to its token unasked."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.dashboard.stack import Stack, running_stack
from tests.e2e.gateway.stack import free_port
from tests.integration.oidc.test_api_with_provider import auth_section
from tests.oidc.provider import OidcProvider, provider_or_skip, signing_key

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Browser, Page, expect

from tests.e2e.dashboard.token_links import (
    api_calls,
    calls_with_bearer,
    expect_prompt_names,
    expect_signed_in_as,
    record_requests,
    token_left_in_browser,
)

pytestmark = [pytest.mark.slow, pytest.mark.lane]

SECRET = "dashboard-client-secret-0123456789abcdef"  # noqa: S105 - the test client's secret
PEOPLE = {
    "vic": ["gpu-contoso-viewers"],
    "pat": ["gpu-platform-admins", "coffee-club"],
    "mia": ["gpu-contoso-viewers", "gpu-fabrikam-admins"],
}
TENANTS = {"northwind", "contoso", "fabrikam", "adatum", "hobbyists"}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    provider_or_skip()
    running = OidcProvider(tmp_path_factory.mktemp("provider"), [signing_key("k1")], [], PEOPLE)
    yield running  # started by `stack`, once the callback it must know is known
    running.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, provider: OidcProvider) -> Iterator[Stack]:
    port = free_port()
    provider.clients.append(
        {
            "client_id": "gpuplex",
            "client_secret": SECRET,
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "redirect_uris": [f"http://127.0.0.1:{port}/auth/callback"],
        }
    )
    provider.start(provider_or_skip())
    extra = (
        auth_section(provider.issuer)
        + "    client_secret_env: GPUPLEX_DASHBOARD_OIDC_SECRET\n"
        + "    scopes: [openid, gpuplex]\n"
    )
    with running_stack(
        tmp_path_factory.mktemp("control-plane"),
        spec_extra=extra,
        port=port,
        env={"GPUPLEX_DASHBOARD_OIDC_SECRET": SECRET},
    ) as running:
        yield running


def sign_in(page: Page, login: str) -> None:
    page.goto("/dashboard/")
    button = page.get_by_test_id("oidc-signin")
    expect(button).to_be_visible()
    expect(button).to_contain_text("127.0.0.1")
    button.click()
    # the provider's own pages: its development login takes any name, then consent
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any")
    page.locator("button[type=submit]").click()
    page.locator("button[type=submit]").click()
    page.wait_for_url("**/dashboard/")
    expect(page.get_by_test_id("whoami-name")).to_have_text(login)


def tenants_shown(page: Page) -> set[str]:
    """Every tenant the page draws anything of: tenant rows, GPU slices, usage, budgets."""
    page.wait_for_selector("body[data-loaded=true]")
    page.wait_for_selector("[data-testid=gpu-slice]")
    found: list[str] = page.locator("[data-tenant]").evaluate_all(
        "els => els.map(e => e.dataset.tenant).filter(t => t)"
    )
    return set(found)


def our_errors(errors: list[str], stack: Stack) -> list[str]:
    """The page's errors but those of the provider's pages (which ask for web fonts from the
    internet, which this machine cannot reach): uncaught exceptions and errors at our site."""
    return [e for e in errors if e.startswith("uncaught") or stack.base_url in e]


def test_a_contoso_viewer_sees_contoso_only(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "vic")
    expect(page.get_by_test_id("whoami-role")).to_have_text("tenant-viewer")
    expect(page.get_by_test_id("whoami-tenant")).to_have_text("tenant contoso")
    assert tenants_shown(page) == {"contoso"}
    html = page.content()
    assert not [other for other in TENANTS - {"contoso"} if other in html]
    assert our_errors(page_errors, stack) == []


def test_a_platform_admin_sees_every_tenant(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "pat")
    expect(page.get_by_test_id("whoami-role")).to_have_text("platform-admin")
    assert tenants_shown(page) == TENANTS
    assert our_errors(page_errors, stack) == []


def test_a_person_on_two_tenants_picks_which_one_the_page_shows(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "mia")
    picker = page.get_by_test_id("tenant-choice")
    expect(picker).to_be_visible()
    assert picker.locator("option").all_inner_texts() == ["contoso", "fabrikam"]
    expect(page.get_by_test_id("whoami-tenant")).to_have_text("tenant contoso")
    expect(page.get_by_test_id("whoami-role")).to_have_text("tenant-viewer")
    assert tenants_shown(page) == {"contoso"}
    picker.select_option("fabrikam")
    expect(page.get_by_test_id("whoami-tenant")).to_have_text("tenant fabrikam")
    expect(page.get_by_test_id("whoami-role")).to_have_text("tenant-admin")
    rows = page.locator("[data-testid=tenant-row]")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-tenant", "fabrikam")
    assert our_errors(page_errors, stack) == []


def test_after_sign_out_the_session_cookie_no_longer_works(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "pat")
    name = f"gpuplex_session_{urlsplit(stack.base_url).port}"
    cookies = {c["name"]: c for c in page.context.cookies(stack.base_url)}
    session = cookies[name]
    assert session["httpOnly"] is True
    assert session["sameSite"] == "Strict"
    before = httpx.get(f"{stack.base_url}/api/v1/whoami", cookies={name: session["value"]})
    assert before.status_code == 200
    page.locator("#signout").click()
    expect(page.get_by_test_id("signin")).to_be_visible()
    assert name not in {c["name"] for c in page.context.cookies(stack.base_url)}
    after = httpx.get(f"{stack.base_url}/api/v1/whoami", cookies={name: session["value"]})
    assert after.status_code == 401
    assert after.json()["error"]["code"] == "unauthenticated"
    # reloading shows the sign-in card again, not a half-signed-in page
    page.reload()
    expect(page.get_by_test_id("signin")).to_be_visible()
    assert our_errors(page_errors, stack) == []


def test_a_token_link_still_works_beside_the_sign_in(browser: Browser, stack: Stack) -> None:
    context = browser.new_context(base_url=stack.base_url)
    page = context.new_page()
    page.goto(f"/dashboard/#token={stack.contoso_token}")
    expect(page.get_by_test_id("whoami-tenant")).to_have_text("tenant contoso")
    context.close()


def tenant_admin_token(stack: Stack, name: str, tenant: str) -> str:
    """A token an attacker could make in a tenant of their own (made here by the platform admin)."""
    reply = httpx.post(
        f"{stack.base_url}/api/v1/tokens",
        headers={"Authorization": f"Bearer {stack.admin_token}"},
        json={"name": name, "role": "tenant-admin", "tenant": tenant},
    )
    assert reply.status_code == 201, reply.text
    token: str = reply.json()["token"]
    return token


def session_cookie(page: Page, stack: Stack) -> dict[str, str]:
    name = f"gpuplex_session_{urlsplit(stack.base_url).port}"
    cookies = {c["name"]: c["value"] for c in page.context.cookies(stack.base_url)}
    return {name: cookies[name]} if name in cookies else {}


def test_a_token_link_does_not_switch_a_signed_in_person_silently(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "vic")
    cookie = session_cookie(page, stack)
    # the review's attack: another tenant's admin token under the victim's own name
    linked = tenant_admin_token(stack, "vic", "fabrikam")
    sent = record_requests(page)
    page.goto(f"/dashboard/#token={linked}")
    prompt = page.get_by_test_id("link-prompt")
    expect(prompt).to_be_visible()
    expect_prompt_names(page, "current", "vic", "tenant-viewer", "tenant contoso")
    expect_prompt_names(page, "new", "vic", "tenant-admin", "tenant fabrikam")
    expect(page.get_by_test_id("link-keep")).to_be_focused()
    assert page.evaluate("location.hash") == ""
    assert not token_left_in_browser(page, linked)
    expect_signed_in_as(page, "vic", "tenant-viewer", "tenant contoso")  # behind the prompt

    page.keyboard.press("Enter")  # the default keeps the session
    expect(prompt).to_be_hidden()
    expect_signed_in_as(page, "vic", "tenant-viewer", "tenant contoso")
    assert tenants_shown(page) == {"contoso"}
    assert not token_left_in_browser(page, linked)
    # the link's token went out once, to ask who it is; every other call went with the session
    assert calls_with_bearer(sent, linked) == [("GET", "/api/v1/whoami")]
    others = [r for r in api_calls(sent) if "authorization" not in r.headers]
    assert len(others) == len(api_calls(sent)) - 1
    [cookie_name] = cookie
    assert all(f"{cookie_name}=" in r.all_headers().get("cookie", "") for r in others)
    assert httpx.get(f"{stack.base_url}/api/v1/whoami", cookies=cookie).status_code == 200
    page.reload()  # nothing of the link is left to come back
    expect_signed_in_as(page, "vic", "tenant-viewer", "tenant contoso")
    expect(prompt).to_be_hidden()
    assert our_errors(page_errors, stack) == []


def test_switching_to_a_links_token_ends_the_session_and_shows_its_name_as_text(
    page: Page, stack: Stack, page_errors: list[str]
) -> None:
    sign_in(page, "vic")
    cookie = session_cookie(page, stack)
    name = 'fabrikam <b>admin</b><img src=x onerror="window.__pwned = 1">'
    linked = tenant_admin_token(stack, name, "fabrikam")
    page.goto(f"/dashboard/#token={linked}")
    prompt = page.get_by_test_id("link-prompt")
    expect_prompt_names(page, "new", name, "tenant-admin", "tenant fabrikam")
    assert prompt.locator("b, img").count() == 0
    assert not token_left_in_browser(page, linked)

    page.get_by_test_id("link-switch").click()
    expect(prompt).to_be_hidden()
    expect_signed_in_as(page, name, "tenant-admin", "tenant fabrikam")
    rows = page.locator("[data-testid=tenant-row]")
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-tenant", "fabrikam")
    assert page.evaluate("sessionStorage.getItem('gpuplex.token')") == linked
    assert session_cookie(page, stack) == {}
    ended = httpx.get(f"{stack.base_url}/api/v1/whoami", cookies=cookie)
    assert ended.status_code == 401
    assert page.locator("b, img[src=x]").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert our_errors(page_errors, stack) == []
