"""GET /queues, the dashboard's queues panel, on a real store (SQLite and PostgreSQL): per queue the
guarantee, limit, use (the plan's replicas and the jobs that hold capacity) and borrowing per
kind; the queued jobs by their place in their tenant's queue with why each waits, and the jobs
that hold capacity with where they run. A tenant-scoped caller sees its own queue, the
organisation and team above it as numbers only, and its own jobs: never another tenant's queue,
jobs, names or reasons."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpuplex.core.access import Principal, Role
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.queues.tree import tree_of
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.queues import QueuesSpec
from gpuplex.server.reason_filter import ReasonFilter
from gpuplex.store.jobs import Job
from tests.integration.server.conftest import SPEC_YAML, T0, TENANT_A, TENANT_B, Api, error_of
from tests.integration.server.test_jobs_api import RECLAIM_SPEC_YAML, share, submit

#: alphaco is guaranteed 40 GiB of shared GPU memory and limited to 60; bravoco, its sibling, has
#: no guarantee and a limit of 50; charlieco sits in another organisation.
QUEUES_YAML = """\
queues:
  preemption: {min_runtime_s: 0}
  organisations:
    - name: acme
      guarantee: {gpu_memory_gib: 60}
      teams:
        - name: research
          guarantee: {gpu_memory_gib: 60}
          tenants:
            - name: alphaco
              guarantee: {gpu_memory_gib: 40}
              limit: {gpu_memory_gib: 60, compute_percent: 200}
              weight: 2
            - name: bravoco
              limit: {gpu_memory_gib: 50}
    - name: globex
      teams:
        - name: batch-team
          tenants:
            - name: charlieco
              guarantee: {mig: {3g.40gb: 1}}
"""
OTHER_NAMES = (TENANT_B, "charlieco", "globex", "batch-team")


def run(api: Api, job_id: str, gpu_index: int, memory_gib: int) -> None:
    """Move a queued job to running, placed as the runner places it."""
    job = api.ctx.jobs.get(job_id)
    assert job is not None
    placement = Placement(
        tenant=job.tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=Mode.MPS,
        node="node-one",
        gpu_indices=[gpu_index],
        gpu_model="H100-80GB",
        memory_mib=memory_gib * 1024,
        compute_percent=25,
        reason="placed on free capacity",
    ).model_dump(mode="json")
    now = api.clock.utc_now()
    api.ctx.jobs.transition(job_id, JobState.STARTING, "admitted", now=now, placement=placement)
    api.ctx.jobs.transition(job_id, JobState.RUNNING, "its process is up", now=now)


@pytest.fixture
def busy(api: Api) -> dict[str, str]:
    """Running: alphaco's 10 GiB job and bravoco's 30 GiB one (beside each tenant's 20 GiB
    replica). Queued: alphaco's 35 GiB job (past its limit) and a 1 GiB one behind it; bravoco's
    5 GiB job (past its limit)."""
    api.apply(SPEC_YAML + QUEUES_YAML)
    jobs = {"a_run": submit(api, share(10, name="a-run"))}
    run(api, jobs["a_run"], 0, 10)
    jobs["b_run"] = submit(api, share(30), caller="b-admin", tenant=TENANT_B)
    run(api, jobs["b_run"], 1, 30)  # a second later: running jobs are listed oldest first
    jobs["a_big"] = submit(api, share(35, name="a-big"))
    jobs["b_wait"] = submit(api, share(5), caller="b-admin", tenant=TENANT_B)
    jobs["a_next"] = submit(api, share(1))
    return jobs


def queue_rows(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["name"]: q for q in reply["queues"]}


def kind(queue: dict[str, Any], name: str) -> tuple[float, float | None, float, float]:
    [found] = [k for k in queue["resources"] if k["kind"] == name]
    return (found["guarantee"], found["limit"], found["in_use"], found["borrowed"])


def test_the_platform_admin_sees_every_queue_with_use_and_borrowing(
    api: Api, busy: dict[str, str]
) -> None:
    reply = api.get("/queues")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["configured"] is True
    assert body["revision"] == api.ctx.revisions.current().revision  # type: ignore[union-attr]
    assert [q["name"] for q in body["queues"]] == [
        "cluster",
        "acme",
        "research",
        TENANT_A,
        TENANT_B,
        "globex",
        "batch-team",
        "charlieco",
    ]
    rows = queue_rows(body)
    alpha = rows[TENANT_A]
    # its chat replica (20 GiB, 50 %) and its running job (10 GiB)
    assert kind(alpha, "gpu_memory_gib") == (40, 60, 30, 0)
    assert kind(alpha, "compute_percent") == (0, 200, 50, 50)
    assert (alpha["weight"], alpha["parent"], alpha["depth"], alpha["level"]) == (
        2,
        "research",
        3,
        "tenant",
    )
    assert (alpha["queued_jobs"], alpha["holding_jobs"]) == (2, 1)
    assert kind(rows[TENANT_B], "gpu_memory_gib") == (0, 50, 50, 50)
    assert kind(rows["research"], "gpu_memory_gib") == (60, None, 80, 20)
    assert (rows["research"]["queued_jobs"], rows["research"]["holding_jobs"]) == (None, None)
    assert kind(rows["charlieco"], "mig:3g.40gb") == (1, None, 1, 0)  # its batch replica
    assert rows["cluster"]["level"] == "cluster"

    jobs = body["jobs"]
    assert [(j["id"], j["state"], j["position"]) for j in jobs] == [
        (busy["a_big"], "queued", 1),
        (busy["b_wait"], "queued", 1),
        (busy["a_next"], "queued", 2),
        (busy["a_run"], "running", None),
        (busy["b_run"], "running", None),
    ]
    reasons = {j["id"]: j["waiting_reason"] for j in jobs}
    assert reasons[busy["a_big"]] == (
        "alphaco would pass its limit: 30 GiB of GPU memory held + 35 asked > 60"
    )
    assert reasons[busy["b_wait"]] == (
        "bravoco would pass its limit: 50 GiB of GPU memory held + 5 asked > 50"
    )
    assert reasons[busy["a_next"]] == f"behind {busy['a_big']}, the first of alphaco's queued jobs"
    running = {j["id"]: j for j in jobs if j["state"] == "running"}
    assert running[busy["a_run"]]["placement"] == {
        "node": "node-one",
        "gpu_indices": [0],
        "mode": "mps",
        "mig_profile": None,
        "memory_mib": 10240,
    }
    assert running[busy["a_run"]]["waiting_reason"] is None
    assert running[busy["a_run"]]["ask"] == {"gpu_memory_gib": 10}
    assert body["queued_truncated"] is False


@pytest.mark.parametrize("caller", ["a-viewer", "a-admin"])
def test_a_tenant_sees_its_own_queue_and_jobs_only(
    api: Api, busy: dict[str, str], caller: str
) -> None:
    reply = api.get("/queues", caller)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert [q["name"] for q in body["queues"]] == ["acme", "research", TENANT_A]
    rows = queue_rows(body)
    # the team above it: numbers only, with its sibling's use in the sum but no job counts
    assert kind(rows["research"], "gpu_memory_gib") == (60, None, 80, 20)
    assert (rows["research"]["queued_jobs"], rows["research"]["holding_jobs"]) == (None, None)
    assert (rows[TENANT_A]["queued_jobs"], rows[TENANT_A]["holding_jobs"]) == (2, 1)
    assert {j["tenant"] for j in body["jobs"]} == {TENANT_A}
    assert {j["id"] for j in body["jobs"]} == {busy["a_big"], busy["a_next"], busy["a_run"]}
    for secret in (*OTHER_NAMES, busy["b_run"], busy["b_wait"]):
        assert secret not in reply.text, secret


def test_a_reason_naming_another_tenants_job_hides_it_from_the_tenant(api: Api) -> None:
    api.apply(RECLAIM_SPEC_YAML)
    theirs = [submit(api, share(60), caller="b-admin", tenant=TENANT_B) for _ in range(2)]
    for gpu_index, job_id in enumerate(theirs):  # bravoco has no guarantee: borrowed capacity
        run(api, job_id, gpu_index, 60)
    mine = submit(api, share(40))  # inside alphaco's guarantee: it would reclaim bravoco's
    as_admin = {j["id"]: j for j in api.get("/queues").json()["jobs"]}[mine]["waiting_reason"]
    reply = api.get("/queues", "a-viewer")
    as_tenant = {j["id"]: j for j in reply.json()["jobs"]}[mine]["waiting_reason"]
    # the rules would preempt them, but no GPU of this fleet takes the share even then: the
    # reason names them all the same (core.jobs.backfill)
    assert as_admin.startswith("no GPU has room for it now, nor would once j"), as_admin
    assert any(job_id in as_admin for job_id in theirs)
    assert "nor would once another tenant's job" in as_tenant, as_tenant
    assert not any(job_id in reply.text for job_id in theirs)


def test_the_other_tenant_sees_only_its_own(api: Api, busy: dict[str, str]) -> None:
    body = api.get("/queues", "b-viewer").json()
    assert [q["name"] for q in body["queues"]] == ["acme", "research", TENANT_B]
    assert [j["id"] for j in body["jobs"]] == [busy["b_wait"], busy["b_run"]]
    assert TENANT_A not in str(body)


def test_limit_bounds_the_queued_jobs_listed(api: Api, busy: dict[str, str]) -> None:
    body = api.get("/queues", params={"limit": 1}).json()
    assert [j["id"] for j in body["jobs"] if j["state"] == "queued"] == [busy["a_big"]]
    assert len([j for j in body["jobs"] if j["state"] == "running"]) == 2
    assert body["queued_truncated"] is True
    bad = api.get("/queues", params={"limit": 0})
    assert bad.status_code == 422
    assert (error_of(bad)["code"], error_of(bad)["field"]) == ("invalid_request", "limit")


def test_before_any_spec_there_is_nothing_to_show(bare_api: Api) -> None:
    assert bare_api.get("/queues", "a-viewer").json() == {
        "revision": None,
        "configured": False,
        "queues": [],
        "jobs": [],
        "queued_truncated": False,
    }


def test_a_spec_without_queues_has_none_to_show(api: Api) -> None:
    body = api.get("/queues", "a-viewer").json()  # the suite's spec has no queues:
    assert (body["configured"], body["queues"], body["jobs"]) == (False, [], [])


def test_without_a_token_it_is_401(api: Api) -> None:
    reply = api.get("/queues", None)
    assert reply.status_code == 401
    assert error_of(reply)["code"] == "unauthenticated"


def test_the_reason_filter_hides_other_tenants_and_queues_off_the_callers_path() -> None:
    tree = tree_of(QueuesSpec.model_validate(_queues_only()), {"gpu_memory_gib": 160.0})
    others = [_job("j00000001", TENANT_B)]
    viewer = Principal("v", Role.TENANT_VIEWER, TENANT_A)
    shown = ReasonFilter.for_caller(viewer, others, [TENANT_A, TENANT_B, "charlieco"], tree)
    assert shown(
        "preempting j00000001 for it; bravoco's; globex, batch-team do not lend; team research"
    ) == (
        "preempting another tenant's job for it; another tenant's; another queue, another queue "
        "do not lend; team research"
    )
    assert shown("behind j00000002, the first of alphaco's queued jobs").startswith(
        "behind j00000002"
    )
    assert shown("bravoco-extra stays") == "bravoco-extra stays"  # whole words only
    admin = Principal("p", Role.PLATFORM_ADMIN)
    everything = ReasonFilter.for_caller(admin, others, [TENANT_B], tree)
    assert everything("preempting j00000001 of bravoco") == "preempting j00000001 of bravoco"


def _queues_only() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(QUEUES_YAML)["queues"]
    return loaded


def _job(job_id: str, tenant: str) -> Job:
    spec = JobSpec.model_validate({"tenant": tenant, "gpu": {"memory_gib": 1}, "command": ["x"]})
    return Job(
        id=job_id,
        tenant=tenant,
        name=None,
        spec=spec,
        priority=0,
        state=JobState.RUNNING,
        reason="",
        submitted_at=T0,
        started_at=None,
        finished_at=None,
        attempts=0,
        exit_code=None,
        placement=None,
        actor="suite",
        cancel_requested=False,
    )
