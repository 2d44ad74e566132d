"""The RBAC matrix (tests/integration/server/test_rbac_matrix.py: every published operation x
every role x own tenant and another's) once more, with the callers signed in through the real
identity provider instead of gpuplex's tokens: service accounts in `gpu-platform-admins`,
`gpu-alphaco-admins` and `gpu-alphaco-viewers` get exactly the statuses the matrix gives the
roles those groups map to, bodies included (another tenant's objects answered as a tenant that does
not exist). Then again as dashboard sessions of people in those groups (the session cookie and its
CSRF token). Every spec the matrix applies carries the same `auth.oidc`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gpuplex.store.db import open_store
from gpuplex.store.web_sessions import csrf_token_of
from tests.integration.oidc.test_api_with_provider import (
    GROUPS,
    SECRET,
    auth_section,
    client,
)
from tests.integration.server import test_rbac_matrix as matrix
from tests.integration.server.conftest import SPEC_YAML, Api, make_api
from tests.integration.server.test_jobs_api import QUEUES_SPEC_YAML
from tests.oidc.provider import OidcProvider, provider_or_skip, signing_key

#: The matrix's callers, as the service accounts whose groups give their roles.
SIGNED_IN = {"admin": "svc-platform", "a-admin": "svc-a-admin", "a-viewer": "svc-a-viewer"}


@pytest.fixture
def oidc_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    provider = OidcProvider(
        tmp_path, [signing_key("k1")], [client(c) for c in GROUPS], dict(GROUPS)
    )
    provider.start(provider_or_skip())
    auth = auth_section(provider.issuer)
    monkeypatch.setattr(matrix, "SPEC_YAML", SPEC_YAML + auth)
    monkeypatch.setattr(matrix, "QUEUES_SPEC_YAML", QUEUES_SPEC_YAML + auth)
    engine = open_store(f"sqlite:///{tmp_path / 'gpuplex.db'}")
    made = make_api(engine, tmp_path, apply_spec=False)
    try:
        with made.client:
            made.apply(SPEC_YAML + auth)
            for caller, client_id in SIGNED_IN.items():
                made.tokens[caller] = provider.client_token(client_id, SECRET)
            yield made
    finally:
        engine.dispose()
        provider.stop()


@pytest.mark.parametrize("role", matrix.ROLES)
def test_each_signed_in_role_gets_the_status_the_matrix_gives(oidc_api: Api, role: str) -> None:
    assert oidc_api.tokens[role].count(".") == 2  # the provider's JWT, not a gpuplex token
    matrix.test_each_role_gets_the_status_the_matrix_gives(oidc_api, role)


@pytest.fixture
def session_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """The matrix's callers as dashboard sessions (the cookie and its CSRF token) of people in
    the same groups; the sessions are made in the store as a sign-in makes them (the sign-in
    itself is tested in test_dashboard_sign_in.py)."""
    issuer = "https://login.example.com/realms/acme"
    auth = auth_section(issuer)
    monkeypatch.setattr(matrix, "SPEC_YAML", SPEC_YAML + auth)
    monkeypatch.setattr(matrix, "QUEUES_SPEC_YAML", QUEUES_SPEC_YAML + auth)
    engine = open_store(f"sqlite:///{tmp_path / 'gpuplex.db'}")
    made = make_api(engine, tmp_path, apply_spec=False)
    try:
        with made.client:
            made.apply(SPEC_YAML + auth)
            cookies = {}
            for caller, person in SIGNED_IN.items():
                cookies[caller], _ = made.ctx.web_sessions.create(
                    issuer=issuer,
                    subject=person,
                    name=person,
                    groups=GROUPS[person],
                    now=made.clock.utc_now(),
                    expires_at=made.clock.utc_now() + timedelta(days=30),
                )

            def headers(caller: str | None) -> dict[str, str]:
                if caller is None:
                    return {}
                cookie = cookies[caller]
                return {
                    "cookie": f"gpuplex_session={cookie}",
                    "x-csrf-token": csrf_token_of(cookie),
                }

            monkeypatch.setattr(made, "headers", headers)
            yield made
    finally:
        engine.dispose()


@pytest.mark.parametrize("role", matrix.ROLES)
def test_each_dashboard_session_gets_the_status_the_matrix_gives(
    session_api: Api, role: str
) -> None:
    assert "authorization" not in session_api.headers(role)
    matrix.test_each_role_gets_the_status_the_matrix_gives(session_api, role)
