"""A flood of sign-ins and of failed credentials against the control plane's real HTTP app (uvicorn
with its front door, on loopback) and the real identity provider: a person who began signing in
before the flood finishes at the provider and is signed in, however many `/auth/login` requests
came from one address or from many; past the bounds new sign-ins get 429 `too_many_sign_ins`
with `Retry-After`. Failed callbacks and bad credentials from one address get 429
`too_many_failed_auth` past 20 in a minute (valid credentials are still taken), while another
address still gets through.

Each client is an httpx client bound to its own loopback source address (127.0.9.x), so the
control plane sees it as the address it is; the bounds are lowered (10 per address, 40 in all)
so the flood takes seconds, not minutes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gpuplex.clock import SYSTEM_CLOCK, utc_now
from gpuplex.server.app import create_app
from gpuplex.server.context import ServerContext
from gpuplex.server.run import ROLLUP_WINDOW_S, apply_spec_file, http_options
from gpuplex.store.db import open_store
from gpuplex.store.tables import WebSignInRow
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import SIGN_IN_TTL, WebSessions
from tests.e2e.gateway.stack import free_port
from tests.integration.oidc.test_api_with_provider import with_auth
from tests.integration.oidc.test_dashboard_sign_in import PEOPLE, SECRET, SECRET_VARIABLE
from tests.oidc.provider import OidcProvider, fill_in_forms, provider_or_skip, signing_key

PER_CLIENT = 10
MAX_SIGN_INS = 40
PERSON = "127.0.9.1"
FORGED_JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6Im5vbmUifQ.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"


@dataclass
class Site:
    url: str
    engine: Engine
    admin_token: str

    @property
    def session_cookie(self) -> str:
        return f"gpuplex_session_{urlsplit(self.url).port}"

    def client(self, address: str) -> httpx.Client:
        """A browser (or script) whose connections come from `address`."""
        transport = httpx.HTTPTransport(local_address=address)
        return httpx.Client(transport=transport, follow_redirects=True, timeout=15)

    def under_way(self) -> int:
        with Session(self.engine) as session:
            return session.scalar(select(func.count()).select_from(WebSignInRow)) or 0


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    node = provider_or_skip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    provider = OidcProvider(tmp_path, [signing_key("k1")], [], dict(PEOPLE))
    provider.clients.append(
        {
            "client_id": "gpuplex",
            "client_secret": SECRET,
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
            "redirect_uris": [f"{url}/auth/callback"],
        }
    )
    monkeypatch.setenv(SECRET_VARIABLE, SECRET)
    spec = tmp_path / "gpuplex.yaml"
    spec.write_text(
        with_auth(provider.issuer)
        + f"    client_secret_env: {SECRET_VARIABLE}\n"
        + "    scopes: [openid, gpuplex]\n"
    )
    engine = open_store(f"sqlite:///{tmp_path / 'gpuplex.db'}")
    provider.start(node)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK, ROLLUP_WINDOW_S)
    apply_spec_file(ctx.spec_history, spec, actor="test")
    bounded = WebSessions(engine, max_sign_ins=MAX_SIGN_INS, sign_ins_per_client=PER_CLIENT)
    ctx = replace(ctx, web_sessions=bounded)
    admin_token, _ = TokenRepository(engine).create(
        name="admin", role="platform-admin", tenant=None, expires_at=None, now=utc_now(), actor="t"
    )
    config = uvicorn.Config(
        create_app(ctx), host="127.0.0.1", port=port, log_level="warning", **http_options()
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started, "the control plane did not start within 10 s"
        yield Site(url, engine, admin_token)
    finally:
        server.should_exit = True
        thread.join(10)
        provider.stop()
        engine.dispose()


def login(client: httpx.Client, site: Site, **headers: str) -> httpx.Response:
    return client.get(f"{site.url}/auth/login", headers=headers, follow_redirects=False)


def error_code(reply: httpx.Response) -> str:
    code: str = reply.json()["error"]["code"]
    return code


def retry_after_s(reply: httpx.Response) -> int:
    return int(reply.headers["retry-after"])


@pytest.mark.slow
def test_a_sign_in_begun_before_a_login_flood_completes(site: Site) -> None:
    with site.client(PERSON) as person:
        begun = login(person, site)
        assert begun.status_code == 303
        at_provider = person.get(begun.headers["location"])  # the person is at the provider now
        assert at_provider.status_code == 200

        # One address floods, claiming other addresses in X-Forwarded-For: it is not a proxy
        # uvicorn trusts, so every request counts against its own address.
        with site.client("127.0.9.2") as flooder:
            answers = [
                login(flooder, site, **{"x-forwarded-for": f"198.51.100.{n % 250}"})
                for n in range(100)
            ]
        assert [a.status_code for a in answers[:PER_CLIENT]] == [303] * PER_CLIENT
        assert {a.status_code for a in answers[PER_CLIENT:]} == {429}
        refused = answers[-1]
        assert error_code(refused) == "too_many_sign_ins"
        assert "this address has 10 sign-ins under way" in refused.json()["error"]["message"]
        assert 0 < retry_after_s(refused) <= SIGN_IN_TTL.total_seconds()

        # Many addresses fill the table: once it is full, every address is refused, and nothing
        # begun before is pushed out.
        for n in range(3, 20):
            with site.client(f"127.0.9.{n}") as flooder:
                for _ in range(PER_CLIENT):
                    login(flooder, site)
        assert site.under_way() == MAX_SIGN_INS
        with site.client("127.0.9.99") as newcomer:
            full = login(newcomer, site)
            assert full.status_code == 429
            assert error_code(full) == "too_many_sign_ins"
            assert "as many as it keeps" in full.json()["error"]["message"]
            assert 0 < retry_after_s(full) <= SIGN_IN_TTL.total_seconds()

            # The person finishes at the provider, comes back, and is signed in.
            landed = fill_in_forms(person, at_provider, "carol")
            assert urlsplit(str(landed.url)).path == "/dashboard/", landed.url
            assert "signin_error" not in urlsplit(str(landed.url)).fragment
            session = person.get(f"{site.url}/auth/session").json()
            assert (session["signed_in"], session["name"]) == (True, "carol")
            assert person.get(f"{site.url}/api/v1/whoami").json()["role"] == "tenant-viewer"

            # The place the person held is free again: one more sign-in fits.
            assert login(newcomer, site).status_code == 303
            assert login(newcomer, site).status_code == 429


def test_failed_callbacks_and_bad_tokens_from_one_address_get_429_while_another_gets_through(
    site: Site,
) -> None:
    callback = f"{site.url}/auth/callback"
    whoami = f"{site.url}/api/v1/whoami"
    keys = f"{site.url}/api/v1/tenants/alphaco/keys"
    valid = {"authorization": f"Bearer {site.admin_token}"}

    with site.client("127.0.9.20") as guesser:
        for n in range(20):
            failed = guesser.get(
                callback, params={"state": f"guess-{n}", "code": "x"}, follow_redirects=False
            )
            assert failed.status_code == 303
            said = parse_qs(urlsplit(failed.headers["location"]).fragment)["signin_error"][0]
            assert "sign in again" in said
        throttled = guesser.get(callback, params={"state": "guess-20", "code": "x"})
        assert throttled.status_code == 429
        assert error_code(throttled) == "too_many_failed_auth"
        assert 0 < retry_after_s(throttled) <= 60
        # the same address's bad credentials are 429 too; its good ones are taken
        assert guesser.get(whoami, headers={"authorization": "Bearer gpt_x_y"}).status_code == 429
        assert guesser.get(whoami, headers=valid).json()["role"] == "platform-admin"

    with site.client("127.0.9.21") as prober:
        bad = [
            {"authorization": "Bearer gpt_unknown_secret"},
            {"authorization": f"Bearer {FORGED_JWT}"},
        ]
        for n in range(20):
            if n % 4 == 3:  # with a body: refused by the body guard before the body is read
                reply = prober.post(keys, headers=bad[n % 2], json={"name": "k"})
                # and the connection ends there: the next request must not race its close
                assert reply.headers.get("connection") == "close"
            elif n % 4 == 2:  # a session cookie that names no session
                reply = prober.get(whoami, headers={"cookie": f"{site.session_cookie}=gone"})
            else:
                reply = prober.get(whoami, headers=bad[n % 2])
            assert reply.status_code == 401, (n, reply.text)
            assert error_code(reply) == "unauthenticated"
        for refused in (
            prober.get(whoami, headers=bad[0]),
            prober.post(keys, headers=bad[1], json={"name": "k"}),
            prober.get(whoami, headers={"cookie": f"{site.session_cookie}=gone"}),
        ):
            assert refused.status_code == 429, refused.text
            assert error_code(refused) == "too_many_failed_auth"
            assert 0 < retry_after_s(refused) <= 60
        # a valid credential from the throttled address is still taken, as at the gateway: one
        # client behind the same NAT as a guesser is not locked out by it
        assert prober.get(whoami, headers=valid).json()["role"] == "platform-admin"

    # Another address is neither throttled nor slowed by those failures.
    with site.client("127.0.9.22") as other:
        assert other.get(whoami, headers=bad[0]).status_code == 401
        assert other.get(whoami, headers=valid).json()["role"] == "platform-admin"
        landed = fill_in_forms(other, other.get(f"{site.url}/auth/login"), "pat")
        assert urlsplit(str(landed.url)).path == "/dashboard/", landed.url
        assert other.get(f"{site.url}/auth/session").json()["signed_in"] is True


def test_requests_without_credentials_are_answered_401_and_do_not_count(site: Site) -> None:
    with site.client("127.0.9.30") as stranger:
        for _ in range(30):
            assert stranger.get(f"{site.url}/api/v1/whoami").status_code == 401
        ok = stranger.get(
            f"{site.url}/api/v1/whoami", headers={"authorization": f"Bearer {site.admin_token}"}
        )
        assert ok.status_code == 200
