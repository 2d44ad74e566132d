"""The read-only views over the API: the audit log paged by cursor, events merged from the audit log
and the host runtime, the GPU map, pagination of listings, and the one error body on every error
status."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

from gpuplex.core.meter import GpuSample
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


def make_keys(api: Api, tenant: str, count: int) -> list[str]:
    prefixes = []
    for n in range(count):
        reply = api.post(f"/tenants/{tenant}/keys", json={"name": f"{tenant}-key-{n}"})
        assert reply.status_code == 201, reply.text
        prefixes.append(reply.json()["prefix"])
    return prefixes


def test_the_audit_log_pages_back_by_cursor_newest_first(api: Api) -> None:
    make_keys(api, TENANT_A, 4)
    make_keys(api, TENANT_B, 3)
    everything = api.get("/audit", params={"limit": 1000}).json()
    assert everything["next_cursor"] is None
    all_ids = [e["id"] for e in everything["items"]]
    assert all_ids == sorted(all_ids, reverse=True)
    assert len(all_ids) == 5 + 1 + 7  # the suite's tokens, the spec, the keys

    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        page = api.get("/audit", params=params).json()
        assert len(page["items"]) <= 3
        seen += [e["id"] for e in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == all_ids
    assert pages == 5

    mine = api.get("/audit", "a-admin", params={"limit": 2}).json()
    assert [e["action"] for e in mine["items"]] == ["key.create", "key.create"]
    rest = api.get("/audit", "a-admin", params={"limit": 100, "cursor": mine["next_cursor"]})
    assert {e["tenant"] for e in rest.json()["items"]} == {TENANT_A}
    assert len(mine["items"]) + len(rest.json()["items"]) == 4 + 2  # keys, A's two tokens
    only = api.get("/audit", params={"action": "key.create", "tenant": TENANT_B}).json()["items"]
    assert [e["target"].split(":")[0] for e in only] == ["key"] * 3


def test_events_merge_the_audit_log_and_the_host_runtime_newest_first(api: Api) -> None:
    host = api.host
    for minutes, kind, target in (
        (5, "started", f"{TENANT_A}/chat#0"),
        (6, "started", f"{TENANT_B}/embed#0"),
        (7, "mig_created", "GPU 1"),
    ):
        host.append_event(
            Event(at=T0 + timedelta(minutes=minutes), kind=kind, target=target, message="ok")
        )
    api.report_from_host()
    api.clock.advance(timedelta(minutes=10))
    make_keys(api, TENANT_A, 1)

    every = api.get("/events").json()
    assert [(e["source"], e["kind"]) for e in every[:4]] == [
        ("audit", "key.create"),
        ("host", "mig_created"),
        ("host", "started"),
        ("host", "started"),
    ]
    ats = [e["at"] for e in every]
    assert ats == sorted(ats, reverse=True)
    assert len(api.get("/events", params={"limit": 2}).json()) == 2

    mine = api.get("/events", "a-viewer").json()
    assert {e["tenant"] for e in mine} == {TENANT_A}
    assert [(e["source"], e["kind"], e["target"]) for e in mine if e["source"] == "host"] == [
        ("host", "started", f"{TENANT_A}/chat#0")
    ]


MPS_GPU = 1  # where the test spec's plan puts alphaco's and bravoco's MPS shares


def test_the_gpu_map_shows_modes_and_occupants_and_tenants_only_their_own(api: Api) -> None:
    api.ctx.samples.append(
        [
            GpuSample(
                at=T0,
                node="node-one",
                gpu_index=MPS_GPU,
                tenant=tenant,
                workload=workload,
                replica=0,
                memory_used_mib=used,
                utilization_percent=40.0,
                source="sim",
            )
            for tenant, workload, used in ((TENANT_A, "chat", 10_000), (TENANT_B, "embed", 5_000))
        ]
        # memory is shown per GPU: what the same replica holds elsewhere is not added here
        + [
            GpuSample(
                at=T0,
                node="node-one",
                gpu_index=1 - MPS_GPU,
                tenant=TENANT_A,
                workload="chat",
                replica=0,
                memory_used_mib=99_999,
                utilization_percent=None,
                source="sim",
            )
        ]
    )
    whole = api.get("/nodes").json()
    assert [g["index"] for g in whole["nodes"][0]["gpus"] if g["mode"] == "mps"] == [MPS_GPU]
    assert whole["revision"] == 1
    [node] = whole["nodes"]
    assert node["name"] == "node-one"
    gpus = {g["mode"]: g for g in node["gpus"]}
    assert sorted(gpus) == ["mig", "mps"]
    shared = {o["tenant"]: o for o in gpus["mps"]["occupants"]}
    assert set(shared) == {TENANT_A, TENANT_B}
    assert (shared[TENANT_A]["thread_percent"], shared[TENANT_A]["memory_mib"]) == (50, 20 * 1024)
    assert shared[TENANT_A]["used_memory_mib"] == 10_000
    [slice_] = gpus["mig"]["occupants"]
    assert (slice_["tenant"], slice_["mig_profile"]) == (TENANT_C, "3g.40gb")
    assert isinstance(slice_["mig_start_slot"], int)
    assert slice_["thread_percent"] is None

    mine = api.get("/nodes", "a-viewer").json()
    [my_node] = mine["nodes"]
    [my_gpu] = my_node["gpus"]
    assert my_gpu["index"] == gpus["mps"]["index"]
    assert [(o["tenant"], o["used_memory_mib"]) for o in my_gpu["occupants"]] == [
        (TENANT_A, 10_000)
    ]


def test_nodes_before_any_spec_is_an_empty_map(bare_api: Api) -> None:
    assert bare_api.get("/nodes").json() == {
        "revision": None,
        "sampled_at": None,
        "nodes": [],
        "rider_share_window_s": 86_400,
    }
    assert bare_api.get("/tenants").json() == {"items": [], "next_cursor": None}


def test_listings_page_by_limit_and_cursor(api: Api) -> None:
    make_keys(api, TENANT_A, 5)
    names: list[str] = []
    cursor = None
    for _ in range(10):
        params: dict[str, str | int] = {"limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = api.get(f"/tenants/{TENANT_A}/keys", params=params).json()
        names += [k["name"] for k in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert names == [f"{TENANT_A}-key-{n}" for n in range(5)]

    tenants = api.get("/tenants", params={"limit": 2}).json()
    assert [t["name"] for t in tenants["items"]] == [TENANT_A, TENANT_B]
    last = api.get("/tenants", params={"limit": 2, "cursor": tenants["next_cursor"]}).json()
    assert last == {"items": [last["items"][0]], "next_cursor": None}
    assert last["items"][0]["name"] == TENANT_C


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "zzz",
        "!!",
        _cursor("p-1"),
        _cursor("x10"),
        _cursor("p"),
        _cursor("p1e3"),
        _cursor("p" + "9" * 40),
        "\u00e9",
    ],
)
def test_a_bad_cursor_is_422_naming_cursor(api: Api, cursor: str) -> None:
    for path in ("/tenants", "/tokens", "/audit", f"/tenants/{TENANT_A}/keys"):
        reply = api.get(path, params={"cursor": cursor})
        assert reply.status_code == 422, (path, cursor, reply.text)
        error = error_of(reply)
        assert (error["code"], error["field"]) == ("invalid_request", "cursor")


@pytest.mark.parametrize("limit", ["0", "-1", "1001", "99999999999999999999999", "ten", "1.5"])
def test_a_bad_limit_is_422_naming_limit(api: Api, limit: str) -> None:
    reply = api.get("/tenants", params={"limit": limit})
    assert reply.status_code == 422, reply.text
    assert error_of(reply)["field"] == "limit"


def test_every_error_status_has_the_one_body(api: Api) -> None:
    json_type = {"content-type": "application/json"}
    cases = [
        (401, api.get("/tenants", None), "unauthenticated"),
        (403, api.get("/spec", "a-admin"), "forbidden"),
        (404, api.get(f"/tenants/{NO_TENANT}"), "not_found"),
        (404, api.get("/no/such/path"), "not_found"),
        (405, api.call("PATCH", "/tokens"), "method_not_allowed"),
        (409, api.post("/spec/apply", json={"spec_yaml": SPEC_YAML, "base_revision": 0}), None),
        (422, api.post("/spec/preview", json={}), "invalid_request"),
        (422, api.post("/spec/preview", content=b"{not json"), "invalid_request"),
        (422, api.post("/tokens", content=b"\xff\xfe", headers=json_type), "invalid_request"),
    ]
    for status, reply, code in cases:
        assert reply.status_code == status, (status, reply.text)
        error = error_of(reply)
        if code is not None:
            assert error["code"] == code
        assert reply.headers["content-type"] == "application/json"


def test_a_host_event_naming_another_tenant_is_redacted_for_tenant_callers(api: Api) -> None:
    api.host.append_event(
        Event(
            at=T0 + timedelta(minutes=1),
            kind="stopped",
            target=f"{TENANT_A}/chat#0",
            message=f"preempted: its MPS share went to {TENANT_B}/embed#0",
        )
    )
    api.report_from_host()

    def preemption(caller: str) -> str:
        events = api.get("/events", caller).json()
        message: str = next(e["message"] for e in events if e["kind"] == "stopped")
        return message

    assert preemption("admin") == f"preempted: its MPS share went to {TENANT_B}/embed#0"
    assert preemption("a-viewer") == "preempted: its MPS share went to another tenant"
