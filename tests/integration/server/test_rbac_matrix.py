"""Every operation the OpenAPI publishes x every role (platform admin, admin and viewer of tenant A)
x A's objects and B's, with the status each must get. An operation without a row here fails the
suite, so a new endpoint cannot ship without its access rules being written down.

Tenant-scoped callers asking about B get exactly the answer a tenant that does not exist gets, and
no listing they can read names another tenant anywhere in its JSON."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import httpx2
import pytest

from gpuplex.core.meter import GpuSample
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec import RateLimits
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.host.state import Event
from tests.integration.server.conftest import (
    NO_TENANT,
    SPEC_YAML,
    T0,
    TENANT_A,
    TENANT_B,
    TENANT_C,
    Api,
    error_of,
)
from tests.integration.server.test_jobs_api import QUEUES_SPEC_YAML

PERIOD = "2026-03"
OWN, OTHER, NONE = "own", "other", "none"
#: The callers under test; "admin" is a platform admin, the others belong to tenant A.
ROLES = ("admin", "a-admin", "a-viewer")


@dataclass(frozen=True)
class Case:
    """How to call one operation on a tenant's objects, and the status each role gets.

    `expect` maps (role, scope) to a status; a fleet-wide operation has only scope NONE. `call`
    makes the request for a tenant (the scope's), creating whatever object it needs first."""

    call: Callable[[Api, str, str], httpx2.Response]  # (api, caller, tenant)
    expect: dict[tuple[str, str], int]


def scoped(admin: int, a_admin: int, a_viewer: int) -> dict[tuple[str, str], int]:
    """A tenant's object: each role on A's (the given status) and on B's (404 for A's roles)."""
    return {
        ("admin", OWN): admin,
        ("admin", OTHER): admin,
        ("a-admin", OWN): a_admin,
        ("a-admin", OTHER): 404,
        ("a-viewer", OWN): a_viewer,
        ("a-viewer", OTHER): 404,
    }


def fleet(admin: int, a_admin: int, a_viewer: int) -> dict[tuple[str, str], int]:
    return {("admin", NONE): admin, ("a-admin", NONE): a_admin, ("a-viewer", NONE): a_viewer}


def _key_of(api: Api, tenant: str) -> str:
    _, key = api.ctx.keys.create(
        tenant, "victim", [], None, RateLimits(), api.clock.utc_now(), "suite"
    )
    return key.prefix


def _token_of(api: Api, tenant: str) -> str:
    _, token = api.ctx.tokens.create(
        "victim", "tenant-viewer", tenant, None, api.clock.utc_now(), "suite"
    )
    return token.prefix


def _with_budget(api: Api, tenant: str) -> str:
    api.ctx.budgets.set(tenant, Decimal(10), "USD", now=api.clock.utc_now(), actor="suite")
    return tenant


def _with_key_budget(api: Api, tenant: str) -> str:
    api.ctx.budgets.set(
        tenant, Decimal(10), "USD", now=api.clock.utc_now(), actor="suite", key_name="ci"
    )
    return tenant


def _job_of(api: Api, tenant: str) -> str:
    spec = JobSpec.model_validate({"tenant": tenant, "gpu": {"memory_gib": 1}, "command": ["x"]})
    return api.ctx.jobs.submit(spec, now=api.clock.utc_now(), actor="suite").id


def _submit_job(api: Api, caller: str, tenant: str) -> httpx2.Response:
    applied = api.ctx.current.get()
    if applied is None or not applied.spec.queues.enabled:
        api.apply(QUEUES_SPEC_YAML)
    body = {"gpu": {"memory_gib": 1}, "command": ["x"]}
    return api.post(f"/tenants/{tenant}/jobs", caller, json=body)


def _apply(api: Api, caller: str, _: str) -> httpx2.Response:
    current = api.ctx.revisions.current()
    base = current.revision if current is not None else 0
    return api.post("/spec/apply", caller, json={"spec_yaml": SPEC_YAML, "base_revision": base})


HOUR = {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()}

MATRIX: dict[tuple[str, str], Case] = {
    ("GET", "/whoami"): Case(lambda api, who, t: api.get("/whoami", who), fleet(200, 200, 200)),
    ("GET", "/tenants"): Case(lambda api, who, t: api.get("/tenants", who), fleet(200, 200, 200)),
    ("GET", "/tenants/{tenant}"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}", who), scoped(200, 200, 200)
    ),
    ("GET", "/tenants/{tenant}/workloads"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/workloads", who), scoped(200, 200, 200)
    ),
    ("GET", "/spec"): Case(lambda api, who, t: api.get("/spec", who), fleet(200, 403, 403)),
    ("POST", "/spec/preview"): Case(
        lambda api, who, t: api.post("/spec/preview", who, json={"spec_yaml": SPEC_YAML}),
        fleet(200, 403, 403),
    ),
    ("POST", "/spec/apply"): Case(_apply, fleet(201, 403, 403)),
    ("GET", "/tenants/{tenant}/keys"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/keys", who), scoped(200, 200, 200)
    ),
    ("POST", "/tenants/{tenant}/keys"): Case(
        lambda api, who, t: api.post(f"/tenants/{t}/keys", who, json={"name": "k"}),
        scoped(201, 201, 403),
    ),
    ("DELETE", "/tenants/{tenant}/keys/{prefix}"): Case(
        lambda api, who, t: api.delete(f"/tenants/{t}/keys/{_key_of(api, t)}", who),
        scoped(200, 200, 403),
    ),
    ("GET", "/tokens"): Case(lambda api, who, t: api.get("/tokens", who), fleet(200, 200, 403)),
    ("POST", "/tokens"): Case(
        lambda api, who, t: api.post(
            "/tokens", who, json={"name": "n", "role": "tenant-viewer", "tenant": t}
        ),
        scoped(201, 201, 403),
    ),
    ("DELETE", "/tokens/{prefix}"): Case(
        lambda api, who, t: api.delete(f"/tokens/{_token_of(api, t)}", who),
        scoped(200, 200, 403) | {("a-viewer", OTHER): 403},  # viewers may revoke nothing at all
    ),
    ("GET", "/tenants/{tenant}/usage"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/usage", who, params=HOUR),
        scoped(200, 200, 200),
    ),
    ("GET", "/tenants/{tenant}/latency"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/latency", who, params=HOUR),
        scoped(200, 200, 200),
    ),
    ("GET", "/usage"): Case(
        lambda api, who, t: api.get("/usage", who, params=HOUR), fleet(200, 403, 403)
    ),
    ("POST", "/meter/rollup"): Case(
        lambda api, who, t: api.post("/meter/rollup", who, json=HOUR), fleet(200, 403, 403)
    ),
    ("GET", "/tenants/{tenant}/statements/{period}"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/statements/{PERIOD}", who),
        scoped(200, 200, 200),
    ),
    ("GET", "/statements/{period}"): Case(
        lambda api, who, t: api.get(f"/statements/{PERIOD}", who), fleet(200, 403, 403)
    ),
    ("GET", "/tenants/{tenant}/budget"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/budget", who), scoped(200, 200, 200)
    ),
    ("PUT", "/tenants/{tenant}/budget"): Case(
        lambda api, who, t: api.put(f"/tenants/{t}/budget", who, json={"amount": "5"}),
        scoped(200, 200, 403),
    ),
    ("DELETE", "/tenants/{tenant}/budget"): Case(
        lambda api, who, t: api.delete(f"/tenants/{_with_budget(api, t)}/budget", who),
        scoped(200, 200, 403),
    ),
    ("GET", "/tenants/{tenant}/key-spend"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/key-spend", who), scoped(200, 200, 200)
    ),
    ("PUT", "/tenants/{tenant}/key-budgets/{name}"): Case(
        lambda api, who, t: api.put(f"/tenants/{t}/key-budgets/ci", who, json={"amount": "5"}),
        scoped(200, 200, 403),
    ),
    ("DELETE", "/tenants/{tenant}/key-budgets/{name}"): Case(
        lambda api, who, t: api.delete(f"/tenants/{_with_key_budget(api, t)}/key-budgets/ci", who),
        scoped(200, 200, 403),
    ),
    ("POST", "/tenants/{tenant}/jobs"): Case(_submit_job, scoped(201, 201, 403)),
    ("GET", "/tenants/{tenant}/jobs"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/jobs", who), scoped(200, 200, 200)
    ),
    ("GET", "/tenants/{tenant}/jobs/{job_id}"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/jobs/{_job_of(api, t)}", who),
        scoped(200, 200, 200),
    ),
    ("GET", "/jobs/{job_id}"): Case(
        lambda api, who, t: api.get(f"/jobs/{_job_of(api, t)}", who), scoped(200, 200, 200)
    ),
    ("POST", "/tenants/{tenant}/jobs/{job_id}/cancel"): Case(
        lambda api, who, t: api.post(f"/tenants/{t}/jobs/{_job_of(api, t)}/cancel", who),
        scoped(200, 200, 403),
    ),
    ("GET", "/tenants/{tenant}/jobs/{job_id}/logs"): Case(
        lambda api, who, t: api.get(f"/tenants/{t}/jobs/{_job_of(api, t)}/logs", who),
        scoped(200, 200, 200),
    ),
    ("GET", "/audit"): Case(
        lambda api, who, t: api.get("/audit", who, params={"tenant": t}), scoped(200, 200, 403)
    ),
    ("GET", "/events"): Case(lambda api, who, t: api.get("/events", who), fleet(200, 200, 200)),
    ("GET", "/nodes"): Case(lambda api, who, t: api.get("/nodes", who), fleet(200, 200, 200)),
    ("GET", "/queues"): Case(lambda api, who, t: api.get("/queues", who), fleet(200, 200, 200)),
}


def published_operations(api: Api) -> set[tuple[str, str]]:
    paths: dict[str, dict[str, Any]] = api.client.get("/api/v1/openapi.json").json()["paths"]
    return {
        (method.upper(), path.removeprefix("/api/v1"))
        for path, operations in paths.items()
        for method in operations
        if method in {"get", "put", "post", "delete", "patch", "head", "options"}
    }


def test_every_published_operation_has_a_row_in_the_matrix(api: Api) -> None:
    published = published_operations(api)
    assert published - set(MATRIX) == set(), "write the access rules of these operations here"
    assert set(MATRIX) - published == set(), "the matrix names operations the API lacks"
    for key, case in MATRIX.items():
        scopes = {scope for _, scope in case.expect}
        assert scopes in ({NONE}, {OWN, OTHER}), key
        assert {role for role, _ in case.expect} == set(ROLES), key


def test_every_api_route_is_published(api: Api) -> None:
    """Routes hidden from the OpenAPI would escape the matrix: only the docs may be hidden."""
    hidden = {"/api/v1/openapi.json", "/api/v1/docs"}
    served = {
        path
        for path in (getattr(route, "path", None) for route in api.client.app.routes)  # type: ignore[attr-defined]
        if isinstance(path, str) and path.startswith("/api/")
    }
    assert served <= hidden


def _masked(reply: httpx2.Response, tenant: str) -> str:
    """The body with the tenant's name and any key or token prefix blanked out."""
    return re.sub(r"\b[0-9a-f]{8}\b", "<prefix>", reply.text.replace(tenant, "<tenant>"))


@pytest.mark.parametrize("role", ROLES)
def test_each_role_gets_the_status_the_matrix_gives(api: Api, role: str) -> None:
    api.clock.advance(timedelta(hours=2))  # the roll-up range is in the past
    wrong = []
    for (method, path), case in MATRIX.items():
        for (who, scope), status in case.expect.items():
            if who != role:
                continue
            tenant = TENANT_B if scope == OTHER else TENANT_A
            reply = case.call(api, role, tenant)
            if reply.status_code != status:
                wrong.append(
                    f"{method} {path} as {role} on {scope}: {reply.status_code} {reply.text}"
                )
                continue
            if status >= 400:
                error = error_of(reply)
                assert error["code"] == {403: "forbidden", 404: "not_found"}[status]
            if status == 404:
                # B's objects are answered exactly like those of a tenant that does not exist
                nobody = case.call(api, role, NO_TENANT)
                assert nobody.status_code == 404, (method, path, nobody.text)
                assert _masked(reply, TENANT_B) == _masked(nobody, NO_TENANT), (method, path)
    assert wrong == [], "\n".join(wrong)


def _seed_other_tenants(api: Api) -> None:
    """Give B (and C) something in every listing: keys, tokens, a budget, usage, samples, host
    events and audit entries."""
    for tenant in (TENANT_B, TENANT_C):
        _key_of(api, tenant)
        _token_of(api, tenant)
        _with_budget(api, tenant)
        _with_key_budget(api, tenant)
        _job_of(api, tenant)
    api.host.append_event(Event(at=T0, kind="started", target=f"{TENANT_B}/embed#0", message="ok"))
    api.host.append_event(Event(at=T0, kind="started", target=f"{TENANT_A}/chat#0", message="ok"))
    api.report_from_host()
    api.ctx.samples.append(
        [
            GpuSample(
                at=T0,
                node="node-one",
                gpu_index=0,
                tenant=tenant,
                workload=workload,
                replica=0,
                memory_used_mib=1000,
                utilization_percent=50.0,
                source="sim",
            )
            for tenant, workload in ((TENANT_A, "chat"), (TENANT_B, "embed"))
        ]
    )
    api.ctx.usage.insert_many(  # a request through the gateway, with the latency it saw
        [
            UsageRecord(
                request_id=f"{TENANT_B}-request",
                tenant=TENANT_B,
                key_prefix="gpx_b",
                model=f"{TENANT_B}-model",
                endpoint="chat.completions",
                status=200,
                prompt_tokens=10,
                completion_tokens=5,
                latency_s=0.5,
                started_at=T0 + timedelta(minutes=5),
                stream=True,
                queue_wait_s=0.01,
                ttft_s=0.2,
                itl_s=0.02,
            )
        ]
    )
    api.clock.advance(timedelta(hours=2))
    assert api.post("/meter/rollup", json=HOUR).status_code == 200


LISTINGS = [
    "/whoami",
    "/tenants",
    f"/tenants/{TENANT_A}",
    f"/tenants/{TENANT_A}/workloads",
    f"/tenants/{TENANT_A}/keys",
    "/tokens",
    "/audit",
    "/events",
    "/nodes",
    "/queues",
    f"/tenants/{TENANT_A}/budget",
    f"/tenants/{TENANT_A}/key-spend",
    f"/tenants/{TENANT_A}/jobs",
    f"/tenants/{TENANT_A}/statements/{PERIOD}",
    f"/tenants/{TENANT_A}/statements/{PERIOD}?format=csv",
]


@pytest.mark.parametrize("role", ["a-admin", "a-viewer"])
def test_no_listing_a_tenant_reads_names_another_tenant(api: Api, role: str) -> None:
    _seed_other_tenants(api)
    secrets = [k.prefix for k in api.ctx.keys.list() if k.tenant != TENANT_A]
    secrets += [t.prefix for t in api.ctx.tokens.list() if t.tenant not in (TENANT_A, None)]
    read = 0
    for path in [*LISTINGS, f"/tenants/{TENANT_A}/usage", f"/tenants/{TENANT_A}/latency"]:
        params = HOUR if path.endswith(("/usage", "/latency")) else None
        reply = api.get(path, role, params=params)
        if reply.status_code == 403:
            continue
        assert reply.status_code == 200, (path, reply.text)
        read += 1
        for name in (TENANT_B, TENANT_C, *secrets):
            assert name not in reply.text, (path, name, reply.text)
    assert read >= 10
    # the same listings as the platform admin do name them: the check above can fail
    everything = " ".join(
        api.get(path).text for path in ("/tenants", "/tokens", "/audit", "/nodes")
    )
    assert all(name in everything for name in (TENANT_B, TENANT_C, *secrets))


NEIGHBOURS_SPEC = """\
fleet:
  nodes:
    - name: node-one
      gpus:
        - model: H100-80GB
tenants:
  - name: bravoco
    isolation: mps
    priority: 10
    workloads:
      - name: embed
        gpu: {memory_gib: 10, compute_percent: 20}
  - name: alphaco
    isolation: mps
    never_share_with: [bravoco]
    workloads:
      - name: chat
        gpu: {memory_gib: 10, compute_percent: 20}
"""


def test_pending_reasons_do_not_name_the_tenant_in_the_way(api: Api) -> None:
    api.apply(NEIGHBOURS_SPEC)
    as_admin = api.get(f"/tenants/{TENANT_A}/workloads").json()["items"][0]
    assert any(TENANT_B in reason for reason in as_admin["pending_reasons"]), as_admin
    for role in ("a-admin", "a-viewer"):
        mine = api.get(f"/tenants/{TENANT_A}/workloads", role).json()["items"][0]
        assert mine["placed"] == 0
        assert mine["pending_reasons"], mine
        assert not any(TENANT_B in reason for reason in mine["pending_reasons"]), mine
        assert any("another tenant" in reason for reason in mine["pending_reasons"]), mine
