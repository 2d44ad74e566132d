"""A tenant who reads docs/jobs.md#backfill-and-reservations and tries to turn reservations to its
own ends, and an operator who kills the control plane while one stands. Through the control
plane's real app and store (each caller with a real token, the job runner's next step read as
`job show` reads it), and for the restart, a control plane and a host runtime as processes.
docs/security.md#jobs lists them with what holds.

1. Ask big to hold GPUs: a job asking more than its tenant's guarantee gets no reservation, so
   it fences no GPU away from other tenants' work.
2. Squat on reserved GPUs: a job without a max runtime, or one that ends after the reservation
   starts, does not start on the reserved GPUs that are free now; a brief one does.
3. Read who is in the way: a tenant reads `another tenant's job` where the reservation's words
   name another tenant's jobs; the platform admin reads the ids.
4. kill -9 of the control plane while a reservation stands: found again after the restart (it is
   never stored), the reserved job starts on time, and no GPU holds two jobs at once.

The queues reclaim nothing here (`reclaim: false`): what holds the GPUs runs to its max runtime,
as the reservation counts on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine

from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.server.job_views import ADMITTED
from tests.e2e.jobs.stack import JobsStack, eventually, jobs_stack
from tests.integration.server.conftest import TENANT_A, TENANT_B, Api, make_api
from tests.integration.store.conftest import new_sqlite_store, store_templates

__all__ = ["new_sqlite_store", "store_templates"]  # fixtures

GRACE_S = 5
#: how long the jobs holding the GPUs may run: the reservation starts once that, and the grace
#: period, are over
HOLD_S = 600
H100_MIB = 81559
RESERVED = "reserved 8 GPUs on box from about"


def spec_yaml(guarantees: dict[str, int], grace_s: float = GRACE_S) -> str:
    """One server of 8 H100s; each tenant (name: guaranteed GPUs) dedicated, in one team."""
    return yaml.safe_dump(spec(guarantees, grace_s), sort_keys=False)


def spec(guarantees: dict[str, int], grace_s: float = GRACE_S) -> dict[str, Any]:
    leaves = [
        {"name": name, **({"guarantee": {"gpus": gpus}} if gpus else {})}
        for name, gpus in guarantees.items()
    ]
    return {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 8}]}]},
        "tenants": [{"name": n, "isolation": "dedicated", "workloads": []} for n in guarantees],
        "queues": {
            "preemption": {"reclaim": False, "min_runtime_s": 0, "grace_s": grace_s},
            "organisations": [
                {"name": "org", "teams": [{"name": "all", "tenants": leaves}]},
            ],
        },
    }


@pytest.fixture
def api(tmp_path: Path, new_sqlite_store: Callable[[Path], Engine]) -> Iterator[Api]:
    """The API on SQLite, nothing applied yet (each test applies its own spec)."""
    engine = new_sqlite_store(tmp_path / "one.db")
    try:
        made = make_api(engine, tmp_path, apply_spec=False)
        with made.client:
            yield made
    finally:
        engine.dispose()


def job(gpus: int, **fields: Any) -> dict[str, Any]:
    return {"gpu": {"count": gpus}, "command": ["python", "train.py"], **fields}


def submit(api: Api, tenant: str, body: dict[str, Any]) -> str:
    api.clock.advance(timedelta(seconds=1))
    reply = api.post(f"/tenants/{tenant}/jobs", "admin", json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def running(api: Api, tenant: str, gpu: int, max_runtime_s: float = HOLD_S) -> str:
    """A 1-GPU job of `tenant` placed on the box's GPU `gpu` and running from now, as the job
    runner and the host runtime leave it."""
    job_id = submit(api, tenant, job(1, max_runtime_s=max_runtime_s))
    placement = Placement(
        tenant=tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=Mode.DEDICATED,
        node="box",
        gpu_indices=[gpu],
        gpu_model="H100-80GB",
        memory_mib=H100_MIB,
        compute_percent=100,
        reason="placed on box",
    )
    now = api.clock.utc_now()
    dumped = placement.model_dump(mode="json")
    api.ctx.jobs.transition(job_id, JobState.STARTING, "placed on box", now=now, placement=dumped)
    api.ctx.jobs.transition(job_id, JobState.RUNNING, "its process runs", now=now, started_at=now)
    return job_id


def waits(api: Api, tenant: str, job_id: str, caller: str = "admin") -> str:
    """Why `job show` says the job waits (the job runner's next step)."""
    reply = api.get(f"/tenants/{tenant}/jobs/{job_id}", caller)
    assert reply.status_code == 200, reply.text
    shown = reply.json()
    assert shown["state"] == "queued", shown
    reason: str = shown["waiting_reason"]
    return reason


# 1. ask big to hold GPUs -------------------------------------------------------------------------


def test_a_job_asking_beyond_its_guarantee_gets_no_reservation_and_fences_nothing(
    api: Api,
) -> None:
    """alphaco, guaranteed 1 GPU, asks for all 8 while charlieco's jobs hold 4 (each with a max
    runtime, so when the box frees is known). Were it reserved the box, bravoco's job (no max
    runtime) could not start on the 4 free GPUs; it starts there."""
    api.apply(spec_yaml({TENANT_A: 1, TENANT_B: 0, "charlieco": 7}))
    for gpu in range(4):
        running(api, "charlieco", gpu)
    greedy = submit(api, TENANT_A, job(8))
    theirs = submit(api, TENANT_B, job(1))
    assert waits(api, TENANT_B, theirs, "b-admin").startswith(ADMITTED)
    for caller in ("a-admin", "admin"):
        why = waits(api, TENANT_A, greedy, caller)
        assert "reserved" not in why, why


# 2. squat on reserved GPUs -----------------------------------------------------------------------


def test_only_work_sure_to_leave_in_time_starts_on_the_reserved_gpus(api: Api) -> None:
    """bravoco's 8-GPU job, inside its guarantee, is reserved the box from when charlieco's 4
    running jobs' max runtimes are up; alphaco tries to squat on the 4 GPUs free meanwhile."""
    api.apply(spec_yaml({TENANT_A: 0, TENANT_B: 8, "charlieco": 0}))
    for gpu in range(4):
        running(api, "charlieco", gpu)
    big = submit(api, TENANT_B, job(8))
    endless = submit(api, TENANT_A, job(1))  # no max runtime: it could hold its GPU for ever
    too_long = submit(api, TENANT_A, job(1, max_runtime_s=HOLD_S * 2))
    brief = submit(api, TENANT_A, job(1, max_runtime_s=60))  # gone long before
    assert RESERVED in waits(api, TENANT_B, big)
    for squatter in (endless, too_long):
        why = waits(api, TENANT_A, squatter, "a-admin")
        assert not why.startswith(ADMITTED), why
    assert waits(api, TENANT_A, brief, "a-admin").startswith(ADMITTED)


# 3. read who is in the way -----------------------------------------------------------------------


def test_a_reservation_names_no_other_tenants_job_to_a_tenant(api: Api) -> None:
    """alphaco's 8-GPU job waits for two of bravoco's jobs and one of its own: alphaco's callers
    read its own job's id and `another tenant's job` for bravoco's, in `job show`, the jobs list
    and the queues; the platform admin reads every id."""
    api.apply(spec_yaml({TENANT_A: 8, TENANT_B: 0}))
    theirs = [running(api, TENANT_B, gpu) for gpu in (0, 1)]
    mine = running(api, TENANT_A, 2)
    big = submit(api, TENANT_A, job(8))
    whole = waits(api, TENANT_A, big)
    assert RESERVED in whole
    assert all(job_id in whole for job_id in (*theirs, mine)), whole
    for caller in ("a-admin", "a-viewer"):
        listed = api.get(f"/tenants/{TENANT_A}/jobs", caller).json()["items"]
        queues = api.get("/queues", caller).json()["jobs"]
        seen = [
            waits(api, TENANT_A, big, caller),
            *(j["waiting_reason"] for j in listed if j["id"] == big),
            *(j["waiting_reason"] for j in queues if j["id"] == big),
        ]
        assert len(seen) == 3, (listed, queues)
        for why in seen:
            assert RESERVED in why, why
            assert mine in why, why
            assert why.count("another tenant's job") == 2, why
            assert not any(job_id in why for job_id in theirs), why
            assert TENANT_B not in why, why


# 4. kill -9 of the control plane while a reservation stands -------------------------------------

#: the stack's grace period, and how long the jobs holding the GPUs run
LIVE_GRACE_S = 2
LIVE_HOLD_S = 20
#: the runner's and host's passes, a process start and a stop on a loaded machine: a bound on
#: correctness, not a speed target
SLACK_S = 15
#: ignores SIGTERM: it holds its GPU until the host's SIGKILL at the end of the grace period
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 600"]
#: when the reason says the reservation starts: `from about 14:20:05 UTC`
STARTS = re.compile(r"from about (\S+ UTC)")


@pytest.mark.slow
@pytest.mark.stacks
def test_a_reservation_outlives_a_killed_control_plane_and_no_gpu_is_handed_out_twice() -> None:
    with jobs_stack(spec({"lab": 8}, LIVE_GRACE_S)) as stack:
        _reservation_across_a_kill(stack)


def _reservation_across_a_kill(stack: JobsStack) -> None:
    stack.start()
    body = {"gpu": {"count": 1}, "command": STUBBORN, "max_runtime_s": LIVE_HOLD_S}
    holders = [stack.submit("lab", body) for _ in range(4)]
    jobs = dict.fromkeys(holders, "lab")

    def explain() -> str:
        return stack.explain(jobs)

    eventually(
        lambda: all(stack.show("lab", j)["state"] == "running" for j in holders),
        "four 1-GPU jobs running",
        60,
        explain,
    )
    big = stack.submit("lab", {"gpu": {"count": 8}, "command": ["sleep", "1"]})
    jobs[big] = "lab"
    before = eventually(lambda: _reserved(stack, big), "the 8-GPU job's reservation", 30, explain)

    stack.kill_server()
    stack.start_server()
    after = eventually(lambda: _reserved(stack, big), "the reservation found again", 30, explain)
    assert _starts(after) == _starts(before), (before, after)
    assert all(j in after for j in sorted(holders)[:3]), after
    # it still fences the free GPUs: a job without a max runtime does not take them
    endless = stack.submit("lab", {"gpu": {"count": 1}, "command": ["sleep", "1"]})
    jobs[endless] = "lab"

    promised = max(_started_at(stack, j) for j in holders) + LIVE_HOLD_S + LIVE_GRACE_S
    eventually(
        lambda: stack.show("lab", big)["state"] == "succeeded",
        "the 8-GPU job ran",
        LIVE_HOLD_S + LIVE_GRACE_S + SLACK_S + 30,
        explain,
    )
    big_started = _started_at(stack, big)
    assert big_started <= promised + SLACK_S
    eventually(
        lambda: stack.show("lab", endless)["state"] == "succeeded",
        "the job without a max runtime ran after it",
        60,
        explain,
    )
    assert _started_at(stack, endless) >= big_started
    _no_gpu_held_twice(stack, jobs)


def _reserved(stack: JobsStack, job_id: str) -> str | None:
    shown = stack.show("lab", job_id)
    reason: str = shown.get("waiting_reason") or ""
    return reason if RESERVED in reason else None


def _starts(reason: str) -> str:
    found = STARTS.search(reason)
    assert found is not None, reason
    return found[1]


def _started_at(stack: JobsStack, job_id: str) -> float:
    """When the job was placed (its `starting` event), in seconds since the epoch."""
    events = stack.show("lab", job_id)["events"]
    at = next(e["at"] for e in events if e["state"] == "starting")
    return datetime.fromisoformat(at).timestamp()


def _no_gpu_held_twice(stack: JobsStack, jobs: dict[str, str]) -> None:
    """No two runs share a GPU at once, from when their host saw each process start until it saw
    it end (SIGKILL, for the jobs that ignore SIGTERM)."""
    runs: list[tuple[str, frozenset[int], float, float]] = []
    for job_id, tenant in jobs.items():
        shown = stack.show(tenant, job_id)
        gpus = frozenset(shown["placement"]["gpu_indices"])
        for run in shown["runs"]:
            assert run["ended_at"] is not None, (job_id, run)
            start = datetime.fromisoformat(run["started_at"]).timestamp()
            end = datetime.fromisoformat(run["ended_at"]).timestamp()
            runs.append((job_id, gpus, start, end))
    for n, (one, gpus, start, end) in enumerate(runs):
        for other, other_gpus, other_start, other_end in runs[n + 1 :]:
            if gpus & other_gpus:
                assert end <= other_start or other_end <= start, (one, other, runs)
