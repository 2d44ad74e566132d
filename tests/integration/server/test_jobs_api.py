"""The jobs API on a real store (SQLite and PostgreSQL): submit a job checked against the applied
spec, list, show with the events and why a queued job waits (the admission rules, read-only, over
every tenant's jobs and the plan's replicas), cancel, logs from where the runner writes them; a bad
job is 422 `job_invalid` naming the field, a spec without queues 409 `queues_not_configured`, a
viewer cannot submit, another tenant's job is 404, and every change is in the audit log."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpuplex.core.jobs.states import JobState
from gpuplex.host.logs import log_paths
from gpuplex.store.audit import AuditLog
from tests.integration.server.conftest import SPEC_YAML, TENANT_A, TENANT_B, Api, error_of

#: The suite's spec with queues and a third GPU, free for jobs: alphaco may hold 40 GiB of shared
#: GPU memory in all (its chat replica holds 20 of them); bravoco has no limit of its own.
QUEUES_SPEC_YAML = (
    SPEC_YAML.replace("{model: H100-80GB, count: 2}", "{model: H100-80GB, count: 3}")
    + """\
queues:
  organisations:
    - name: acme
      teams:
        - name: research
          tenants:
            - name: alphaco
              limit: {gpu_memory_gib: 40, compute_percent: 200}
            - name: bravoco
"""
)


def share(memory_gib: float, **fields: Any) -> dict[str, Any]:
    return {"gpu": {"memory_gib": memory_gib}, "command": ["python", "train.py"], **fields}


def submit(api: Api, body: dict[str, Any], caller: str = "a-admin", tenant: str = TENANT_A) -> str:
    api.clock.advance(timedelta(seconds=1))  # jobs of one priority start oldest first
    reply = api.post(f"/tenants/{tenant}/jobs", caller, json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


@pytest.fixture
def queues(api: Api) -> Api:
    api.apply(QUEUES_SPEC_YAML)
    return api


def test_submit_list_and_show_a_job(queues: Api) -> None:
    api = queues
    body = share(10, name="train", priority=3, env={"SEED": "7"}, max_runtime_s=600)
    reply = api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=body)
    assert reply.status_code == 201, reply.text
    job = reply.json()
    assert (job["tenant"], job["name"], job["state"], job["priority"]) == (
        TENANT_A,
        "train",
        "queued",
        3,
    )
    assert job["submitted_by"] == api.actor("a-admin")
    assert job["job"]["env"] == {"SEED": "7"}
    assert job["job"]["command"] == ["python", "train.py"]
    listed = api.get(f"/tenants/{TENANT_A}/jobs", "a-viewer").json()["items"]
    assert [j["id"] for j in listed] == [job["id"]]
    shown = api.get(f"/tenants/{TENANT_A}/jobs/{job['id']}", "a-viewer").json()
    assert [e["state"] for e in shown["events"]] == ["queued"]
    assert (
        shown["waiting_reason"]
        == "admitted by the queues: it starts when the job runner picks it up (placed on node-one)"
    )
    [entry] = AuditLog(api.ctx.engine).entries("job.submit")
    assert (entry.actor, entry.tenant, entry.target) == (
        api.actor("a-admin"),
        TENANT_A,
        f"{TENANT_A}/{job['id']}",
    )


def test_a_tenant_in_the_body_must_be_the_paths(queues: Api) -> None:
    assert submit(queues, share(1, tenant=TENANT_A))
    reply = queues.post(f"/tenants/{TENANT_A}/jobs", json=share(1, tenant=TENANT_B))
    assert reply.status_code == 422
    error = error_of(reply)
    assert (error["code"], error["field"]) == ("job_invalid", "tenant")


def test_why_a_queued_job_waits_comes_from_the_admission_rules(queues: Api) -> None:
    api = queues
    too_big = submit(api, share(50))  # more than the limit, whatever runs: holds nobody back
    first = submit(api, share(10))  # 20 held by the chat replica + 10 = 30 of 40
    second = submit(api, share(15))  # 30 + 15 > 40
    reasons = {
        job_id: api.get(f"/tenants/{TENANT_A}/jobs/{job_id}", "a-viewer").json()["waiting_reason"]
        for job_id in (first, second, too_big)
    }
    assert reasons[first].startswith("admitted by the queues")
    assert (
        reasons[second] == "alphaco would pass its limit: 30 GiB of GPU memory held + 15 asked > 40"
    )
    assert reasons[too_big] == (
        "can never start: it asks more than alphaco's limit: 50 GiB of GPU memory asked > 40"
    )
    # once the first runs, the second is still held by the limit; cancelling the first frees it
    api.ctx.jobs.transition(first, JobState.STARTING, "admitted", now=api.clock.utc_now())
    assert (
        "would pass its limit"
        in api.get(f"/tenants/{TENANT_A}/jobs/{second}").json()["waiting_reason"]
    )
    api.ctx.jobs.transition(first, JobState.FAILED, "start failed", now=api.clock.utc_now())
    shown = api.get(f"/tenants/{TENANT_A}/jobs/{second}").json()
    assert shown["waiting_reason"].startswith("admitted by the queues")
    assert api.get(f"/tenants/{TENANT_A}/jobs/{first}").json()["waiting_reason"] is None


def test_list_by_state(queues: Api) -> None:
    api = queues
    queued = submit(api, share(1))
    cancelled = submit(api, share(1))
    assert api.post(f"/tenants/{TENANT_A}/jobs/{cancelled}/cancel", "a-admin").status_code == 200
    by_state = api.get(f"/tenants/{TENANT_A}/jobs", params={"state": "cancelled"}).json()["items"]
    assert [j["id"] for j in by_state] == [cancelled]
    both = api.get(
        f"/tenants/{TENANT_A}/jobs", params=[("state", "queued"), ("state", "cancelled")]
    )
    assert {j["id"] for j in both.json()["items"]} == {queued, cancelled}
    bad = api.get(f"/tenants/{TENANT_A}/jobs", params={"state": "done"})
    assert bad.status_code == 422
    assert error_of(bad)["field"] == "state.0"


def test_cancel_a_queued_job_then_again(queues: Api) -> None:
    api = queues
    job_id = submit(api, share(1))
    reply = api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-admin")
    assert reply.status_code == 200, reply.text
    assert (reply.json()["state"], reply.json()["cancel_requested"]) == ("cancelled", True)
    again = api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-admin")
    assert again.status_code == 409
    assert error_of(again)["code"] == "job_state_conflict"
    [entry] = AuditLog(api.ctx.engine).entries("job.cancel")
    assert entry.actor == api.actor("a-admin")


def test_a_running_job_is_marked_for_the_runner(queues: Api) -> None:
    api = queues
    job_id = submit(api, share(1))
    api.ctx.jobs.transition(job_id, JobState.STARTING, "admitted", now=api.clock.utc_now())
    reply = api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-admin").json()
    assert (reply["state"], reply["cancel_requested"]) == ("starting", True)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (share(1, gpu={"count": 1}), "gpu.count", "isolation"),  # alphaco shares GPUs (MPS)
        (share(1, gpu={"mig_profile": "1g.10gb"}), "gpu.mig_profile", "isolation"),
        ({"gpu": {"memory_gib": 1}}, "body", "command"),  # nothing to run
        (share(1, priority=5000), "priority", "1000"),
        (share(1, comand=["x"]), "comand", '"command"'),
    ],
)
def test_a_bad_job_is_422_naming_the_field(
    queues: Api, body: dict[str, Any], field: str, words: str
) -> None:
    reply = queues.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=body)
    assert reply.status_code == 422, reply.text
    error = error_of(reply)
    assert error["field"] == field, error
    assert error["code"] in ("job_invalid", "invalid_request")
    assert words in error["message"]
    assert queues.ctx.jobs.list(TENANT_A) == []


def test_a_tenant_without_a_queue_cannot_submit(queues: Api) -> None:
    reply = queues.post(
        "/tenants/charlieco/jobs", json={**share(1), "gpu": {"mig_profile": "3g.40gb"}}
    )
    assert reply.status_code == 422
    error = error_of(reply)
    assert (error["code"], error["field"]) == ("job_invalid", "tenant")
    assert "has no queue" in error["message"]


def test_a_spec_without_queues_takes_no_jobs(api: Api) -> None:
    reply = api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share(1))
    assert reply.status_code == 409
    assert error_of(reply)["code"] == "queues_not_configured"


def test_a_viewer_cannot_submit_or_cancel(queues: Api) -> None:
    api = queues
    assert api.post(f"/tenants/{TENANT_A}/jobs", "a-viewer", json=share(1)).status_code == 403
    job_id = submit(api, share(1))
    assert api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-viewer").status_code == 403
    assert api.ctx.jobs.get(job_id) is not None
    assert api.ctx.jobs.get(job_id).state is JobState.QUEUED  # type: ignore[union-attr]


def test_another_tenants_job_is_not_found_by_any_path(queues: Api) -> None:
    api = queues
    theirs = submit(api, share(1), caller="b-admin", tenant=TENANT_B)
    for path in (f"/tenants/{TENANT_B}/jobs/{theirs}", f"/tenants/{TENANT_A}/jobs/{theirs}"):
        assert api.get(path, "a-admin").status_code == 404, path
        assert api.get(f"{path}/logs", "a-admin").status_code == 404, path
        assert api.post(f"{path}/cancel", "a-admin").status_code == 404, path
    assert api.get(f"/tenants/{TENANT_A}/jobs", "a-admin").json()["items"] == []
    assert api.ctx.jobs.get(theirs).state is JobState.QUEUED  # type: ignore[union-attr]


RECLAIM_SPEC_YAML = (
    SPEC_YAML
    + """\
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
              guarantee: {gpu_memory_gib: 60}
            - name: bravoco
"""
)


def test_a_reason_naming_another_tenants_job_hides_its_id_from_the_tenant(api: Api) -> None:
    api.apply(RECLAIM_SPEC_YAML)
    theirs = [submit(api, share(60), caller="b-admin", tenant=TENANT_B) for _ in range(2)]
    for job_id in theirs:  # bravoco has no guarantee: its jobs run on borrowed capacity
        api.ctx.jobs.transition(job_id, JobState.STARTING, "admitted", now=api.clock.utc_now())
    mine = submit(api, share(40))  # inside alphaco's guarantee: it would reclaim bravoco's
    path = f"/tenants/{TENANT_A}/jobs/{mine}"
    as_admin = api.get(path, "admin").json()["waiting_reason"]
    as_tenant = api.get(path, "a-viewer").json()["waiting_reason"]
    # the rules would preempt them, but no GPU of this fleet takes the share even then: the
    # reason names them all the same (core.jobs.backfill)
    assert as_admin.startswith("no GPU has room for it now, nor would once j"), as_admin
    assert any(job_id in as_admin for job_id in theirs)
    assert "nor would once another tenant's job" in as_tenant, as_tenant
    assert not any(job_id in as_tenant for job_id in theirs)


def test_logs_are_what_the_host_reported_of_the_jobs_files(queues: Api) -> None:
    api = queues
    job_id = submit(api, share(1))
    empty = api.get(f"/tenants/{TENANT_A}/jobs/{job_id}/logs", "a-viewer").json()
    assert empty["lines"] == []
    assert "not started" in empty["note"]
    stdout, stderr = log_paths(api.host.logs, TENANT_A, f"job-{job_id}-0")
    stdout.write_text("".join(f"step {n}\n" for n in range(5)))
    stderr.write_text("warning: slow\n")
    not_yet = api.get(f"/tenants/{TENANT_A}/jobs/{job_id}/logs", "a-viewer").json()
    assert not_yet["lines"] == []  # the files are the host's: nothing until it reports them
    api.report_from_host(job_id)
    reply = api.get(f"/tenants/{TENANT_A}/jobs/{job_id}/logs", params={"tail": 2}).json()
    assert reply["lines"] == [
        {"stream": "stdout", "text": "step 3"},
        {"stream": "stdout", "text": "step 4"},
        {"stream": "stderr", "text": "warning: slow"},
    ]
    assert reply["note"] is None
