"""The dashboard's sign-in against the real identity provider, over HTTP as a browser makes it
(the Chromium test in tests/e2e/dashboard/test_dashboard_sign_in.py clicks through the same):
authorization code + PKCE through the provider's pages back to the control plane, a session cookie
that is HttpOnly and SameSite=Strict, a CSRF token every change must carry, sign-out that kills the
cookie, and the ways in that must stay shut: a state used twice or from another browser, a
`return_to` on another site, a person whose groups give no role."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.abuse.front_door import start_control_plane
from tests.e2e.gateway.stack import stop
from tests.integration.oidc.test_api_with_provider import with_auth
from tests.integration.server.conftest import TENANT_A
from tests.oidc.provider import OidcProvider, fill_in_forms, provider_or_skip, signing_key

SECRET = "dashboard-client-secret-0123456789abcdef"  # noqa: S105 - the test client's secret
SECRET_VARIABLE = "GPUPLEX_TEST_OIDC_SECRET"  # noqa: S105 - a variable's name
PEOPLE = {
    "carol": ["gpu-alphaco-viewers"],
    "alice": ["gpu-alphaco-admins"],
    "pat": ["gpu-platform-admins"],
    "nobody": ["coffee-club"],
    "max": ["gpu-alphaco-viewers", "gpu-bravoco-admins"],
}


@dataclass
class Site:
    url: str
    provider: OidcProvider
    admin_token: str  # a gpuplex platform-admin token

    @property
    def cookie(self) -> str:
        """The session cookie's name: after the port, as two control planes on one host need."""
        return f"gpuplex_session_{urlsplit(self.url).port}"

    def browser(self) -> httpx.Client:
        return httpx.Client(follow_redirects=True, timeout=15)

    def sign_in(self, browser: httpx.Client, login: str) -> httpx.Response:
        page = browser.get(f"{self.url}/auth/login")
        return fill_in_forms(browser, page, login)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    node = provider_or_skip()
    provider = OidcProvider(tmp_path, [signing_key("k1")], [], dict(PEOPLE))
    spec = tmp_path / "gpuplex.yaml"
    spec.write_text(
        with_auth(provider.issuer)
        + f"    client_secret_env: {SECRET_VARIABLE}\n"
        + "    scopes: [openid, gpuplex]\n"
    )
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    server, port, admin_token = start_control_plane(tmp_path, spec)
    url = f"http://127.0.0.1:{port}"
    provider.clients.append(
        {
            "client_id": "gpuplex",
            "client_secret": SECRET,
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "redirect_uris": [f"{url}/auth/callback"],
        }
    )
    try:
        provider.start(node)
        yield Site(url, provider, admin_token)
    finally:
        provider.stop()
        stop(server)


def session_cookie_header(reply: httpx.Response, name: str) -> str:
    for response in (*reply.history, reply):
        for header in response.headers.get_list("set-cookie"):
            if header.startswith(f"{name}="):
                return header
    raise AssertionError("no session cookie was set")


def test_a_viewer_signs_in_and_sees_only_their_tenant(site: Site) -> None:
    with site.browser() as browser:
        landed = site.sign_in(browser, "carol")
        assert landed.status_code == 200
        assert urlsplit(str(landed.url)).path == "/dashboard/"
        cookie = session_cookie_header(landed, site.cookie).lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert "secure" not in cookie  # plain http on loopback; Secure over TLS
        me = browser.get(f"{site.url}/api/v1/whoami").json()
        assert (me["role"], me["tenant"]) == ("tenant-viewer", TENANT_A)
        tenants = browser.get(f"{site.url}/api/v1/tenants").json()["items"]
        assert [t["name"] for t in tenants] == [TENANT_A]
        assert browser.get(f"{site.url}/api/v1/tenants/bravoco").status_code == 404


def test_changes_need_the_csrf_token_and_sign_out_ends_the_session(site: Site) -> None:
    with site.browser() as browser:
        site.sign_in(browser, "alice")
        session = browser.cookies[site.cookie]
        csrf = browser.get(f"{site.url}/auth/session").json()["csrf_token"]
        assert csrf not in [c.value for c in browser.cookies.jar]  # only the server gives it
        keys = f"{site.url}/api/v1/tenants/{TENANT_A}/keys"
        refused = browser.post(keys, json={"name": "forged"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "csrf_rejected"
        wrong = browser.post(keys, json={"name": "forged"}, headers={"x-csrf-token": "guess"})
        assert wrong.status_code == 403
        made = browser.post(keys, json={"name": "ci"}, headers={"x-csrf-token": csrf})
        assert made.status_code == 201, made.text
        audit = browser.get(f"{site.url}/api/v1/audit", params={"action": "key.create"}).json()
        assert audit["items"][0]["actor"] == f"alice (oidc alice at {site.provider.issuer})"
        assert browser.post(f"{site.url}/auth/logout").status_code == 403  # no CSRF token
        out = browser.post(f"{site.url}/auth/logout", headers={"x-csrf-token": csrf})
        assert out.status_code == 200, out.text
    # the old cookie, replayed by someone who kept it, no longer works
    with httpx.Client(cookies={site.cookie: session}, timeout=10) as replay:
        after = replay.get(f"{site.url}/api/v1/whoami")
        assert after.status_code == 401
        assert after.json()["error"]["code"] == "unauthenticated"
        body = replay.post(keys, json={"name": "late"}, headers={"x-csrf-token": csrf})
        assert body.status_code == 401  # refused before its body is read


def test_a_platform_admin_sees_every_tenant_and_the_sign_in_is_audited(site: Site) -> None:
    with site.browser() as browser:
        site.sign_in(browser, "pat")
        me = browser.get(f"{site.url}/api/v1/whoami").json()
        assert (me["role"], me["tenant"]) == ("platform-admin", None)
        assert len(browser.get(f"{site.url}/api/v1/tenants").json()["items"]) >= 2
        audit = browser.get(f"{site.url}/api/v1/audit", params={"action": "session.sign-in"})
        (entry,) = audit.json()["items"]
        assert entry["actor"] == f"pat (oidc pat at {site.provider.issuer})"


def test_a_person_on_two_tenants_is_signed_in_and_chooses_per_request(site: Site) -> None:
    with site.browser() as browser:
        site.sign_in(browser, "max")
        session = browser.get(f"{site.url}/auth/session").json()
        assert (session["signed_in"], session["name"], session["platform"]) == (True, "max", False)
        assert session["tenants"] == [TENANT_A, "bravoco"]
        unsaid = browser.get(f"{site.url}/api/v1/tenants")
        assert unsaid.status_code == 403
        assert "X-Gpuplex-Tenant" in unsaid.json()["error"]["message"]
        said = browser.get(f"{site.url}/api/v1/whoami", headers={"x-gpuplex-tenant": "bravoco"})
        assert (said.json()["role"], said.json()["tenant"]) == ("tenant-admin", "bravoco")
    assert httpx.get(f"{site.url}/auth/session", timeout=10).json() == {"signed_in": False}


def test_a_person_whose_groups_give_no_role_is_not_signed_in(site: Site) -> None:
    with site.browser() as browser:
        landed = site.sign_in(browser, "nobody")
        said = parse_qs(urlsplit(str(landed.url)).fragment)["signin_error"][0]
        assert "none of your groups" in said
        assert site.cookie not in browser.cookies


def test_a_state_works_once_and_only_in_the_browser_that_began_it(site: Site) -> None:
    with site.browser() as browser:
        begun = browser.get(f"{site.url}/auth/login", follow_redirects=False)
        assert begun.status_code == 303
        query = parse_qs(urlsplit(begun.headers["location"]).query)
        assert query["code_challenge_method"] == ["S256"]
        assert "code_verifier" not in query
        state = query["state"][0]
    with site.browser() as other:  # an attacker's browser, or a link sent to someone else
        landed = other.get(f"{site.url}/auth/callback", params={"state": state, "code": "x"})
        said = parse_qs(urlsplit(str(landed.url)).fragment)["signin_error"][0]
        assert "another browser" in said
        assert site.cookie not in other.cookies


def test_return_to_must_stay_on_this_site(site: Site) -> None:
    for elsewhere in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        reply = httpx.get(f"{site.url}/auth/login", params={"return_to": elsewhere}, timeout=10)
        assert reply.status_code == 422, elsewhere
        assert reply.json()["error"]["field"] == "return_to"


def test_a_cookie_of_another_port_on_the_same_host_is_not_taken(site: Site) -> None:
    """Browsers send a host's cookies to all its ports: another control plane's session cookie
    (another port's name) is not this one's, even with the same value."""
    with site.browser() as browser:
        site.sign_in(browser, "pat")
        value = browser.cookies[site.cookie]
    for name in ("gpuplex_session", "gpuplex_session_1"):
        reply = httpx.get(f"{site.url}/api/v1/whoami", cookies={name: value}, timeout=10)
        assert reply.status_code == 401, name
    ok = httpx.get(f"{site.url}/api/v1/whoami", cookies={site.cookie: value}, timeout=10)
    assert ok.status_code == 200


def test_the_config_says_whether_sign_in_is_offered(site: Site) -> None:
    reply = httpx.get(f"{site.url}/auth/config", timeout=10).json()
    assert reply == {"oidc": {"issuer": site.provider.issuer}}
    assert os.environ[SECRET_VARIABLE] not in httpx.get(f"{site.url}/auth/config").text


def test_the_id_token_of_a_sign_in_is_not_an_api_token(site: Site) -> None:
    """With the audience left at its default (the client id), which every ID token of gpuplex's
    client carries, a person's ID token (here from a code flow of the test's own, as any site
    using the same client could run) is refused as a bearer token, saying why."""
    admin = {"authorization": f"Bearer {site.admin_token}"}
    current = httpx.get(f"{site.url}/api/v1/spec", headers=admin, timeout=10).json()
    spec = current["spec_yaml"].replace('audience: "urn:gpuplex:api"', 'audience: "gpuplex"')
    applied = httpx.post(
        f"{site.url}/api/v1/spec/apply",
        headers=admin,
        json={"spec_yaml": spec, "base_revision": current["revision"]},
        timeout=10,
    )
    assert applied.status_code == 201, applied.text
    tokens = code_flow_tokens(site, "carol")
    refused = httpx.get(f"{site.url}/api/v1/whoami", headers=bearer(tokens["id_token"]))
    assert refused.status_code == 401, refused.text
    assert "ID token" in refused.json()["error"]["message"]


def code_flow_tokens(site: Site, login: str) -> dict[str, str]:
    """The provider's token answer for `login`, from an authorization code flow the test runs as
    gpuplex's client (with its secret), a nonce and PKCE."""
    verifier = "v" * 64
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    with site.browser() as browser:
        page = browser.get(
            f"{site.provider.issuer}/auth",
            params={
                "client_id": "gpuplex",
                "response_type": "code",
                "scope": "openid gpuplex",
                "redirect_uri": f"{site.url}/auth/callback",
                "nonce": "n-0123456789",
                "state": "s-0123456789",
                "code_challenge": challenge.rstrip(b"=").decode(),
                "code_challenge_method": "S256",
            },
        )
        landed = fill_in_forms(browser, page, login)
    back = next(
        r.headers["location"]
        for r in (*landed.history, landed)
        if "/auth/callback?" in r.headers.get("location", "")
    )
    code = parse_qs(urlsplit(back).query)["code"][0]
    reply = httpx.post(
        f"{site.provider.issuer}/token",
        auth=("gpuplex", SECRET),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": f"{site.url}/auth/callback",
            "code_verifier": verifier,
        },
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    answer: dict[str, str] = reply.json()
    return answer


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}
