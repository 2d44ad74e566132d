"""`gpuplex login` against the real identity provider (device flow), then a CLI call as that person:
the command shows the code, the person approves it in the provider's pages, the token is kept in a
file only its user can read, and `gpuplex job list` runs as a viewer of alphaco: its own tenant's
jobs answer, another tenant's are not found."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.abuse.front_door import start_control_plane
from tests.e2e.gateway.stack import stop
from tests.integration.oidc.test_api_with_provider import with_auth
from tests.oidc.provider import AUDIENCE, OidcProvider, provider_or_skip, signing_key

CLI_CLIENT = {
    "client_id": "gpuplex-cli",
    "token_endpoint_auth_method": "none",  # a public client: a terminal keeps no secret
    "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
    "redirect_uris": [],
    "response_types": [],
}


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    running = OidcProvider(
        tmp_path, [signing_key("k1")], [CLI_CLIENT], {"alice": ["gpu-alphaco-viewers"]}
    )
    running.start(provider_or_skip())
    try:
        yield running
    finally:
        running.stop()


def gpuplex(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "gpuplex.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_login_then_a_cli_call_runs_as_that_person(provider: OidcProvider, tmp_path: Path) -> None:
    spec = tmp_path / "gpuplex.yaml"
    spec.write_text(with_auth(provider.issuer))
    server, port, _ = start_control_plane(tmp_path, spec)
    login_file = tmp_path / "home" / "login.json"
    env = {
        **{k: v for k, v in os.environ.items() if k != "GPUPLEX_TOKEN"},
        "GPUPLEX_LOGIN_FILE": str(login_file),
        "GPUPLEX_SERVER_URL": f"http://127.0.0.1:{port}",
    }
    try:
        argv = [sys.executable, "-m", "gpuplex.cli", "login", "--issuer", provider.issuer]
        argv += ["--client-id", "gpuplex-cli", "--audience", AUDIENCE]
        with subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True) as login:  # noqa: S603
            assert login.stderr is not None
            code = ""
            for line in login.stderr:
                if line.startswith("user code: "):
                    code = line.removeprefix("user code: ").strip()
                    break
            assert code, "gpuplex login showed no user code"
            provider.approve_device(code, login="alice")
            rest = login.stderr.read()
            assert login.wait(timeout=60) == 0, rest
        assert "signed in" in rest
        assert stat.S_IMODE(login_file.stat().st_mode) == 0o600

        mine = gpuplex("job", "list", "alphaco", "-o", "json", env=env)
        assert mine.returncode == 0, mine.stderr
        assert mine.stdout.strip() == "[]"
        theirs = gpuplex("job", "list", "bravoco", "-o", "json", env=env)
        assert theirs.returncode != 0
        assert "bravoco" in theirs.stderr
    finally:
        stop(server)
