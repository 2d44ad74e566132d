"""The control plane's API under test: FastAPI's TestClient over create_app with a real store, on
SQLite (a file under tmp_path) and on PostgreSQL (a schema per test) through the store tests'
fixtures, with a clock the test moves by hand.

The applied spec has three tenants: `alphaco` (tenant A of the RBAC tests) and `bravoco` (tenant B)
share GPU 0 through MPS; `charlieco` has a MIG slice on GPU 1. Tokens exist for a platform admin and
for an admin and a viewer of A and of B."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from gpuplex.host.output_reports import OutputReporter
from gpuplex.host.state import StateDir
from gpuplex.server.app import create_app
from gpuplex.server.context import ServerContext
from gpuplex.store.tokens import TokenRole

# The store tests' fixtures (a new SQLite file or PostgreSQL schema per test), shared, not copied.
from tests.clocks import ManualClock
from tests.integration.store.conftest import engine, postgres_dsn, store_templates, store_url

__all__ = ["engine", "postgres_dsn", "store_templates", "store_url"]

API = "/api/v1"
#: When the spec is applied; every test's clock starts here.
T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
TENANT_A = "alphaco"
TENANT_B = "bravoco"
TENANT_C = "charlieco"
NO_TENANT = "nosuchco"

SPEC_YAML = """\
version: 1
fleet:
  nodes:
    - name: node-one
      gpus:
        - {model: H100-80GB, count: 2}
tenants:
  - name: alphaco
    isolation: mps
    monthly_budget: 100
    workloads:
      - name: chat
        gpu: {memory_gib: 20, compute_percent: 50}
        serve: {model: alphaco-chat, port: 18500}
  - name: bravoco
    isolation: mps
    workloads:
      - name: embed
        gpu: {memory_gib: 20, compute_percent: 50}
        serve: {model: bravoco-embed, port: 18600}
  - name: charlieco
    isolation: mig
    workloads:
      - name: batch
        kind: batch
        gpu: {mig_profile: 3g.40gb}
pricing:
  currency: USD
  gpu_hour: {H100-80GB: "3.60"}
"""

#: Who calls: a name of this suite's choosing -> (role, tenant).
CALLERS: dict[str, tuple[TokenRole, str | None]] = {
    "admin": ("platform-admin", None),
    "a-admin": ("tenant-admin", TENANT_A),
    "a-viewer": ("tenant-viewer", TENANT_A),
    "b-admin": ("tenant-admin", TENANT_B),
    "b-viewer": ("tenant-viewer", TENANT_B),
}


@dataclass
class Api:
    """The app, its context and a token per caller; requests go as `caller` (None: no token)."""

    client: TestClient
    ctx: ServerContext
    clock: ManualClock
    #: a host runtime's state folder, on its own: the API reads what it reports to the store
    host: StateDir
    tokens: dict[str, str] = field(default_factory=dict)

    def report_from_host(self, *job_ids: str, node: str = "node-one") -> None:
        """What a host runtime with `self.host` as its state folder reports to the store: its
        new events, and the output of these jobs (as once their processes ended)."""
        jobs = [job for job_id in job_ids if (job := self.ctx.jobs.get(job_id)) is not None]
        reporter = OutputReporter(self.host, self.ctx.job_logs, self.ctx.host_events, 0.0)
        reporter.report(node, jobs, set(job_ids))

    def actor(self, caller: str) -> str:
        """What the audit log names `caller` by: its token's name and prefix."""
        prefix = self.tokens[caller].split("_")[1]
        return f"{caller}-token (token {prefix})"

    def headers(self, caller: str | None) -> dict[str, str]:
        return {} if caller is None else {"authorization": f"Bearer {self.tokens[caller]}"}

    def call(
        self, method: str, path: str, caller: str | None = "admin", **kwargs: Any
    ) -> httpx2.Response:
        url = path if path.startswith(API) else f"{API}{path}"
        headers = self.headers(caller) | kwargs.pop("headers", {})
        return self.client.request(method, url, headers=headers, **kwargs)

    def get(self, path: str, caller: str | None = "admin", **kwargs: Any) -> httpx2.Response:
        return self.call("GET", path, caller, **kwargs)

    def post(self, path: str, caller: str | None = "admin", **kwargs: Any) -> httpx2.Response:
        return self.call("POST", path, caller, **kwargs)

    def put(self, path: str, caller: str | None = "admin", **kwargs: Any) -> httpx2.Response:
        return self.call("PUT", path, caller, **kwargs)

    def delete(self, path: str, caller: str | None = "admin", **kwargs: Any) -> httpx2.Response:
        return self.call("DELETE", path, caller, **kwargs)

    def apply(self, spec_yaml: str = SPEC_YAML, base_revision: int | None = None) -> int:
        """Apply a spec as the admin; the new revision."""
        if base_revision is None:
            current = self.ctx.revisions.current()
            base_revision = current.revision if current is not None else 0
        reply = self.post(
            "/spec/apply", json={"spec_yaml": spec_yaml, "base_revision": base_revision}
        )
        assert reply.status_code == 201, reply.text
        revision: int = reply.json()["revision"]
        return revision


def error_of(reply: httpx2.Response) -> dict[str, Any]:
    """The one error body's inner object, after checking its shape."""
    body = reply.json()
    assert set(body) == {"error"}, body
    error: dict[str, Any] = body["error"]
    assert isinstance(error.get("code"), str), body
    assert error["code"], body
    assert isinstance(error.get("message"), str), body
    assert error["message"], body
    return error


def make_api(engine: Engine, tmp_path: Path, *, apply_spec: bool = True) -> Api:
    clock = ManualClock(T0)
    host = StateDir(tmp_path / "host-state")
    host.root.mkdir(parents=True, exist_ok=True)
    ctx = ServerContext.open(engine, clock, rollup_window_s=60)
    api = Api(client=TestClient(create_app(ctx)), ctx=ctx, clock=clock, host=host)
    for caller, (role, tenant) in CALLERS.items():
        token, _ = ctx.tokens.create(f"{caller}-token", role, tenant, None, T0, "suite")
        api.tokens[caller] = token
    if apply_spec:
        api.apply()
    return api


@pytest.fixture
def api(engine: Engine, tmp_path: Path) -> Iterator[Api]:
    """The API with the spec applied at T0 and every caller's token made."""
    made = make_api(engine, tmp_path)
    with made.client:
        yield made


@pytest.fixture
def bare_api(engine: Engine, tmp_path: Path) -> Iterator[Api]:
    """The API before any spec is applied."""
    made = make_api(engine, tmp_path, apply_spec=False)
    with made.client:
        yield made
