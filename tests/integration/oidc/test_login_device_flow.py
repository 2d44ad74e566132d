"""`gpuplex login` against the real identity provider (device flow), then a CLI call as that person:
the command shows the code, the person approves it in the provider's pages, the token is kept in a
file only its user can read, and `gpuplex job list` runs as a viewer of alphaco: its own tenant's
jobs answer, another tenant's are not found."""

from __future__ import annotations

import json
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


SERVICE_SECRET = "ci-robot-secret-0123456789abcdef"  # noqa: S105 - the test client's secret
SERVICE_CLIENT = {
    "client_id": "ci-robot",
    "client_secret": SERVICE_SECRET,
    "grant_types": ["client_credentials"],
    "redirect_uris": [],
    "response_types": [],
}


def test_a_service_account_logs_in_with_its_secret_and_its_token_is_renewed(
    tmp_path: Path,
) -> None:
    provider = OidcProvider(
        tmp_path, [signing_key("k1")], [SERVICE_CLIENT], {"ci-robot": ["gpu-alphaco-admins"]}
    )
    provider.start(provider_or_skip())
    spec = tmp_path / "gpuplex.yaml"
    spec.write_text(with_auth(provider.issuer))
    server, port, _ = start_control_plane(tmp_path, spec)
    login_file = tmp_path / "robot" / "login.json"
    env = {
        **{k: v for k, v in os.environ.items() if k != "GPUPLEX_TOKEN"},
        "GPUPLEX_LOGIN_FILE": str(login_file),
        "GPUPLEX_SERVER_URL": f"http://127.0.0.1:{port}",
        "ROBOT_SECRET": SERVICE_SECRET,
    }
    login = ["login", "--issuer", provider.issuer, "--client-id", "ci-robot"]
    login += ["--audience", AUDIENCE, "--scope", "gpuplex"]
    try:
        wrong = gpuplex(*login, "--client-secret-env", "NOT_SET_ANYWHERE", env=env)
        assert wrong.returncode != 0
        assert "NOT_SET_ANYWHERE is not set" in wrong.stderr
        signed_in = gpuplex(*login, "--client-secret-env", "ROBOT_SECRET", env=env)
        assert signed_in.returncode == 0, signed_in.stderr
        saved = json.loads(login_file.read_text())
        assert SERVICE_SECRET not in login_file.read_text()  # where the secret is, not the secret
        assert saved["service_account"]["secret_env"] == "ROBOT_SECRET"  # noqa: S105
        assert stat.S_IMODE(login_file.stat().st_mode) == 0o600

        first = gpuplex("job", "list", "alphaco", "-o", "json", env=env)
        assert first.returncode == 0, first.stderr
        assert gpuplex("job", "list", "bravoco", "-o", "json", env=env).returncode != 0
        # the token ran out: the next command asks the provider for a new one by itself
        login_file.write_text(json.dumps({**saved, "expires_at": 0}))
        listed = gpuplex("job", "list", "alphaco", "-o", "json", env=env)
        assert listed.returncode == 0, listed.stderr
        renewed = json.loads(login_file.read_text())
        assert renewed["access_token"] != saved["access_token"]
        assert renewed["expires_at"] > saved["expires_at"] - 1
    finally:
        stop(server)
        provider.stop()
