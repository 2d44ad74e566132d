"""A real control plane for the browser: `gpuplex server` in its own process on a free loopback
port, a SQLite store seeded with a day of history, a platform-admin token and a tenant-viewer
token for contoso made with `gpuplex token create`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuplex.clock import utc_now
from tests.e2e.dashboard.seed import seed_history
from tests.e2e.gateway.stack import free_port

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "examples" / "saas-single-server.yaml"
#: The admin token's name carries markup: the page must show it as text, never parse it.
ADMIN_NAME = "ops <i>on call</i>"
START_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Stack:
    base_url: str
    admin_token: str
    contoso_token: str
    state_dir: Path  # a folder beside the store (gpuplex.db is in its parent)
    log_path: Path


def _cli(*args: str) -> str:
    completed = subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "gpuplex.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"gpuplex {' '.join(args)} failed:\n{completed.stderr}")
    return completed.stdout


def _token(store_url: str, name: str, *extra: str) -> str:
    reply = json.loads(
        _cli("token", "create", "--name", name, "--store", store_url, "-o", "json", *extra)
    )
    token: str = reply["token"]
    return token


def _wait_until_applied(
    base_url: str, token: str, server: subprocess.Popen[bytes], log: Path
) -> None:
    """Until /api/v1/tenants lists the spec's tenants (the server applied the spec)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    request = urllib.request.Request(  # noqa: S310 - a loopback http URL we built
        f"{base_url}/api/v1/tenants", headers={"Authorization": f"Bearer {token}"}
    )
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(
                f"gpuplex server exited with {server.returncode}:\n{log.read_text()}"
            )
        try:
            with urllib.request.urlopen(request, timeout=2) as reply:  # noqa: S310
                if json.load(reply)["items"] and server.poll() is None:  # ours answered
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(
        f"gpuplex server did not apply the spec in {START_TIMEOUT_S} s:\n{log.read_text()}"
    )


@contextmanager
def running_stack(
    workdir: Path,
    *,
    spec_extra: str = "",
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """`spec_extra`: YAML added to the example spec (an `auth:` section, say); `port`: the
    server's (a free one by default); `env`: more environment for the server."""
    spec = SPEC
    if spec_extra:
        spec = workdir / "gpuplex.yaml"
        spec.write_text(SPEC.read_text() + spec_extra)
    store_url = f"sqlite:///{workdir / 'gpuplex.db'}"
    state_dir = workdir / "state"
    admin = _token(store_url, ADMIN_NAME)  # also creates the store
    seed_history(store_url, spec, utc_now())
    port = port or free_port()
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(  # noqa: S603 - our own interpreter and module, fixed arguments
            [
                sys.executable,
                "-m",
                "gpuplex.cli",
                "server",
                "--spec",
                str(spec),
                "--store",
                store_url,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_until_applied(base_url, admin, server, log_path)
        contoso = _token(
            store_url, "contoso viewer", "--role", "tenant-viewer", "--tenant", "contoso"
        )
        yield Stack(base_url, admin, contoso, state_dir, log_path)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
