"""Spec preview and apply over the API: a preview changes nothing, an apply on top of a revision
that is no longer current is refused with 409 `spec_stale` naming the current revision, and an
invalid spec is a 422 whose problems are located by line and field."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.errors import StaleRevisionError
from gpuplex.server.spec_apply import apply
from gpuplex.store.spec_revisions import SpecRevision
from tests.integration.server.conftest import SPEC_YAML, T0, TENANT_A, Api, error_of

GROWN = SPEC_YAML.replace("replicas: 1\n", "").replace(
    "serve: {model: alphaco-chat, port: 18500}",
    "serve: {model: alphaco-chat, port: 18500}\n        replicas: 2",
)


def test_preview_plans_against_the_applied_revision_and_stores_nothing(bare_api: Api) -> None:
    assert error_of(bare_api.get("/spec"))["code"] == "not_found"
    reply = bare_api.post("/spec/preview", json={"spec_yaml": SPEC_YAML})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["base_revision"] == 0
    placed = {(p["tenant"], p["workload"]) for p in body["plan"]["placements"]}
    assert placed == {("alphaco", "chat"), ("bravoco", "embed"), ("charlieco", "batch")}
    assert bare_api.ctx.revisions.current() is None
    assert bare_api.get("/spec").status_code == 404


def test_apply_stores_a_revision_that_get_spec_returns(bare_api: Api) -> None:
    preview = bare_api.post("/spec/preview", json={"spec_yaml": SPEC_YAML}).json()
    reply = bare_api.post(
        "/spec/apply", json={"spec_yaml": SPEC_YAML, "base_revision": preview["base_revision"]}
    )
    assert reply.status_code == 201, reply.text
    applied = reply.json()
    assert applied["revision"] == 1
    assert applied["spec_sha256"] == preview["spec_sha256"]
    assert applied["actor"] == bare_api.actor("admin")
    assert applied["summary"]["replicas_placed"] == 3
    spec = bare_api.get("/spec").json()
    assert (spec["revision"], spec["spec_yaml"]) == (1, SPEC_YAML)
    assert spec["created_at"] == T0.isoformat().replace("+00:00", "Z")
    actions = [e["action"] for e in bare_api.get("/audit").json()["items"]]
    assert actions[0] == "spec.apply"


def test_an_apply_on_a_stale_revision_is_409_spec_stale_with_the_current_revision(
    api: Api,
) -> None:
    preview = api.post("/spec/preview", json={"spec_yaml": GROWN}).json()
    assert preview["base_revision"] == 1
    api.apply(GROWN, base_revision=1)  # someone else applies first: revision 2
    reply = api.post("/spec/apply", json={"spec_yaml": GROWN, "base_revision": 1})
    assert reply.status_code == 409
    error = error_of(reply)
    assert error["code"] == "spec_stale"
    assert error["current_revision"] == 2
    assert error["field"] == "base_revision"
    current = api.ctx.revisions.current()
    assert current is not None
    assert current.revision == 2
    ahead = api.post("/spec/apply", json={"spec_yaml": GROWN, "base_revision": 7})
    assert ahead.status_code == 409
    assert error_of(ahead)["current_revision"] == 2


def test_an_invalid_spec_is_422_with_problems_located_by_line_and_field(api: Api) -> None:
    bad = SPEC_YAML.replace("compute_percent: 50}", "compute_percent: 500}", 1)
    bad_line = next(n for n, line in enumerate(bad.splitlines(), 1) if "500" in line)
    for path, body in (
        ("/spec/preview", {"spec_yaml": bad}),
        ("/spec/apply", {"spec_yaml": bad, "base_revision": 1}),
    ):
        reply = api.post(path, json=body)
        assert reply.status_code == 422, reply.text
        error = error_of(reply)
        assert error["code"] == "spec_invalid"
        assert error["field"] == "tenants[0].workloads[0].gpu.compute_percent"
        [problem] = error["problems"]
        assert problem["field"] == error["field"]
        assert problem["line"] == bad_line
        assert isinstance(problem["column"], int)
        assert problem["column"] > 1
        assert "100" in problem["message"]
    current = api.ctx.revisions.current()
    assert current is not None
    assert current.revision == 1


def test_unknown_keys_and_broken_yaml_are_located_too(api: Api) -> None:
    unknown = SPEC_YAML.replace("    isolation: mig\n", "    isolation: mig\n    colour: red\n")
    error = error_of(api.post("/spec/preview", json={"spec_yaml": unknown}))
    assert error["field"] == "tenants[2].colour"
    assert error["problems"][0]["line"] == unknown.splitlines().index("    colour: red") + 1
    broken = error_of(api.post("/spec/preview", json={"spec_yaml": "tenants: [\n  {{"}))
    assert broken["code"] == "spec_invalid"
    assert broken["problems"][0]["line"] >= 1


def test_the_applied_spec_changes_what_tenants_see(api: Api) -> None:
    before = api.get(f"/tenants/{TENANT_A}/workloads").json()["items"]
    assert [w["replicas"] for w in before] == [1]
    api.apply(GROWN)
    after = api.get(f"/tenants/{TENANT_A}/workloads").json()["items"]
    assert [(w["replicas"], w["placed"]) for w in after] == [(2, 1)]  # GPU 1 is in MIG mode
    assert after[0]["pending_reasons"], after


def test_an_apply_is_planned_against_its_base_revision_or_refused(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan is made against the applied plan before the store's lock: a caller naming the
    revision that lands in between must be refused, not given a plan made against the one before
    (which would then be stored as if it had been made on top of theirs)."""
    revisions = api.ctx.revisions
    land_first = revisions.append

    def someone_else_lands_revision_2_first(**kwargs: Any) -> SpecRevision:
        land_first(**(kwargs | {"base_revision": 1, "actor": "someone else"}))
        return land_first(**kwargs)

    monkeypatch.setattr(revisions, "append", someone_else_lands_revision_2_first)
    with pytest.raises(StaleRevisionError) as refused:
        # planned against revision 1
        apply(api.ctx.spec_history, GROWN, base_revision=2, actor="admin")
    assert refused.value.current_revision == 1
    monkeypatch.undo()
    current = revisions.current()
    assert current is not None
    assert current.revision == 1
