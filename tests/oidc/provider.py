"""The real OpenID provider for tests: oidc-provider (OpenID Certified, Node.js) started on loopback
with a config the test writes (its signing keys, clients, audience, groups). Installed by the
project's own files (`make test` runs `npm ci` in tests/oidc where npm exists); where Node.js or the
package is missing the tests skip and say why, unless GPUPLEX_REQUIRE_OIDC=1 (CI), where they fail."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from joserfc.jwk import RSAKey

from tests.e2e.gateway.stack import stop
from tests.ports import free_port

HERE = Path(__file__).parent
AUDIENCE = "urn:gpuplex:api"


def provider_or_skip() -> str:
    """The `node` to run the provider with; skips (or fails in CI) where it cannot run."""
    node = shutil.which("node")
    why = None
    if node is None:
        why = "Node.js is not installed: the OpenID provider tests need it"
    elif not (HERE / "node_modules" / "oidc-provider").is_dir():
        why = "oidc-provider is not installed: run `npm ci --prefix tests/oidc` (make test does)"
    if why is not None:
        if os.environ.get("GPUPLEX_REQUIRE_OIDC") == "1":
            pytest.fail(f"{why}, and GPUPLEX_REQUIRE_OIDC=1 makes it mandatory")
        pytest.skip(why)
    assert node is not None
    return node


def signing_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"})


@dataclass
class OidcProvider:
    """One provider process: `issuer` is its URL; `keys` sign its tokens."""

    workdir: Path
    keys: list[RSAKey]
    clients: list[dict[str, Any]]
    groups: dict[str, list[str]] = field(default_factory=dict)
    #: per client (or user) id, other claims its access tokens carry
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: audiences besides AUDIENCE a client may ask a token for (`client_token(resource=...)`)
    audiences: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, node: str) -> None:
        config = {
            "audience": AUDIENCE,
            "jwks": {"keys": [k.as_dict(private=True) for k in self.keys]},
            "clients": self.clients,
            "groups": self.groups,
            "claims": self.claims,
            "audiences": self.audiences,
        }
        path = self.workdir / f"provider-{self.port}.json"
        path.write_text(json.dumps(config))
        path.chmod(0o600)  # private keys
        log_path = self.workdir / f"provider-{self.port}.log"
        # a restart on the same port appends to the log: only what this process writes counts
        start = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - node and our own script
                [node, str(HERE / "provider.mjs"), str(self.port), str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_listening(log_path, start)

    def _wait_listening(self, log_path: Path, start: int) -> None:
        """Until this process says it listens (provider.mjs prints `listening <issuer>`), still
        runs, and its discovery URL answers: a 200 alone may come from another test's server
        on the same port while ours died of EADDRINUSE."""
        assert self.process is not None
        listening = f"listening {self.issuer}".encode()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the OpenID provider exited with {self.process.returncode}:\n{self.log()}"
                )
            if listening in log_path.read_bytes()[start:]:
                try:
                    reply = httpx.get(self.discovery_url, timeout=1)
                    if reply.status_code == 200 and self.process.poll() is None:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.05)
        raise AssertionError(f"the OpenID provider did not start within 30 s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            stop(self.process)

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def jwks(self) -> dict[str, Any]:
        discovery = httpx.get(self.discovery_url, timeout=5).json()
        keys: dict[str, Any] = httpx.get(discovery["jwks_uri"], timeout=5).json()
        return keys

    def client_token(self, client_id: str, secret: str, resource: str = AUDIENCE) -> str:
        """An access token for a service account (the client credentials grant), for the
        audience `resource` (AUDIENCE or one of `audiences`)."""
        reply = httpx.post(
            f"{self.issuer}/token",
            auth=(client_id, secret),
            data={"grant_type": "client_credentials", "scope": "gpuplex", "resource": resource},
            timeout=5,
        )
        assert reply.status_code == 200, reply.text
        token: str = reply.json()["access_token"]
        return token

    def log(self) -> str:
        path = self.workdir / f"provider-{self.port}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def approve_device(self, user_code: str, login: str) -> None:
        """What a person does in a browser: open the verification page, confirm the code, sign in
        (the provider's development login takes any name), consent."""
        with httpx.Client(follow_redirects=True, timeout=10) as browser:
            page = browser.get(f"{self.issuer}/device", params={"user_code": user_code})
            page = fill_in_forms(browser, page, login)
            assert "Success" in page.text, page.text[:500]


def fill_in_forms(browser: httpx.Client, page: httpx.Response, login: str) -> httpx.Response:
    """Go through the provider's pages as a person would, from `page`: sign in as `login` (its
    development login takes any name and password), confirm, consent; the page it ends on."""
    for _ in range(10):
        forms = re.findall(r'<form[^>]*action="([^"]*)"[^>]*>(.*?)</form>', page.text, re.S)
        if not forms:
            break
        action, body = forms[0]
        fields = {
            name: html.unescape(value)
            for name, value in re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', body)
        }
        for name in re.findall(r'<input[^>]*name="([^"]+)"', body):
            fields.setdefault(name, {"login": login, "password": "any"}.get(name, ""))
        if "confirm" in body:
            fields.setdefault("confirm", "yes")
        page = browser.post(urljoin(str(page.url), html.unescape(action)), data=fields)
    return page
