"""What the `#token=` link tests look at: the requests the page sent and which bearer each
carried, where a token could be left in the browser, and the identities the link prompt names."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.sync_api import Page, Request, expect


def record_requests(page: Page) -> list[Request]:
    """Every request the page sends from now on."""
    seen: list[Request] = []

    def on_request(request: Request) -> None:
        seen.append(request)

    page.on("request", on_request)
    return seen


def calls_with_bearer(requests: list[Request], token: str) -> list[tuple[str, str]]:
    """(method, path) of each request that carried `token` as its bearer."""
    return [
        (r.method, urlsplit(r.url).path)
        for r in requests
        if r.headers.get("authorization") == f"Bearer {token}"
    ]


def api_calls(requests: list[Request]) -> list[Request]:
    return [r for r in requests if urlsplit(r.url).path.startswith("/api/v1/")]


def token_left_in_browser(page: Page, token: str) -> bool:
    """Whether `token` is in the address, sessionStorage or localStorage."""
    kept: str = page.evaluate(
        "() => [location.href, JSON.stringify({...sessionStorage}),"
        " JSON.stringify({...localStorage})].join(' ')"
    )
    return token in kept


def expect_prompt_names(page: Page, who: str, name: str, role: str, tenant: str) -> None:
    """`who`: "current" or "new", the prompt's line for the person now or for the link."""
    expect(page.get_by_test_id(f"link-{who}-name")).to_have_text(name)
    expect(page.get_by_test_id(f"link-{who}-role")).to_have_text(role)
    expect(page.get_by_test_id(f"link-{who}-tenant")).to_have_text(tenant)


def expect_signed_in_as(page: Page, name: str, role: str, tenant: str) -> None:
    expect(page.get_by_test_id("whoami-name")).to_have_text(name)
    expect(page.get_by_test_id("whoami-role")).to_have_text(role)
    expect(page.get_by_test_id("whoami-tenant")).to_have_text(tenant)
