"""Jobs are billed like replicas, over the API: a job's run in the store is rolled up into its
tenant's allocation lines (the same dimension and price as its replicas), the statement's total
holds it, and the statement lists each job with its GPU-seconds and cost, in JSON, CSV and the
CLI's table; another tenant sees none of it, and rolling up again counts nothing twice.

The spec (conftest): alphaco holds half an H100 through MPS at 3.60 an hour."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from typing import Any

from rich.console import Console

from gpuplex.cli.statement import jobs_table
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, Api

MINUTE = timedelta(minutes=1)
PERIOD = "2026-03"


def run_job(api: Api, tenant: str, name: str, start: timedelta, end: timedelta | None) -> str:
    """Submit a job and move it as the runner would: placed on half a GPU at `start`, finished at
    `end` (None: still running)."""
    spec = JobSpec.model_validate(
        {"tenant": tenant, "name": name, "gpu": {"memory_gib": 20}, "command": ["train"]}
    )
    job = api.ctx.jobs.submit(spec, now=T0, actor="suite")
    placement = Placement(
        tenant=tenant,
        workload=f"job-{job.id}",
        replica=0,
        mode=Mode.MPS,
        node="node-one",
        gpu_indices=[1],
        gpu_model="H100-80GB",
        memory_mib=20480,
        thread_percent=50,
        compute_percent=50,
        reason="free capacity",
    ).model_dump(mode="json")
    jobs = api.ctx.jobs
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0 + start, placement=placement)
    jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + start + MINUTE)
    if end is not None:
        jobs.transition(job.id, JobState.SUCCEEDED, "exited 0", now=T0 + end, exit_code=0)
    return job.id


def statement(api: Api, tenant: str, caller: str = "admin") -> dict[str, Any]:
    reply = api.get(f"/tenants/{tenant}/statements/{PERIOD}", caller)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_a_jobs_gpu_time_is_in_its_tenants_statement(api: Api) -> None:
    api.clock.advance(60 * MINUTE)
    before = Decimal(statement(api, TENANT_A)["total"])  # nothing rolled up yet
    assert before == 0
    job_id = run_job(api, TENANT_A, "train", 10 * MINUTE, 40 * MINUTE)  # 30 min x 0.5 GPU
    other = run_job(api, TENANT_B, "embed-all", 20 * MINUTE, None)  # open: counts to the end
    api.ctx.metering.catch_up(api.clock.utc_now())

    body = statement(api, TENANT_A, "a-viewer")
    # the replica's hour of half an H100 (1.80) and the job's half hour of half an H100 (0.90)
    assert Decimal(body["total"]) == Decimal("2.70")
    [line] = body["lines"]
    assert (line["dimension"], line["quantity"]) == ("H100-80GB/mps", "0.750000")
    [job] = body["jobs"]
    assert (job["job_id"], job["name"], job["dimension"]) == (job_id, "train", "H100-80GB/mps")
    assert (job["gpu_seconds"], job["instance_seconds"]) == ("900.0", "1800")
    assert (job["quantity"], job["unit"], job["unit_price"], job["amount"]) == (
        "0.250000",
        "gpu_hour",
        "3.600000",
        "0.90",
    )
    [theirs] = statement(api, TENANT_B)["jobs"]  # 40 min open run x 0.5 GPU, to the roll-up end
    assert (theirs["job_id"], theirs["gpu_seconds"]) == (other, "1200.0")
    refused = api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}", "b-viewer")
    assert refused.status_code == 404  # another tenant's statement: not there for them
    assert job_id not in refused.text

    rows = list(
        csv.DictReader(
            io.StringIO(
                api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}", params={"format": "csv"}).text
            )
        )
    )
    assert [r["description"] for r in rows] == [
        "GPU allocation",
        "Total",
        f"Job {job_id} (train), in the lines above",
    ]
    assert rows[-1]["amount"] == "0.90"
    fleet = api.get(f"/statements/{PERIOD}").json()
    jobs = {s["tenant"]: [j["job_id"] for j in s["jobs"]] for s in fleet["tenants"]}
    assert jobs[TENANT_A] == [job_id]
    assert jobs[TENANT_B] == [other]

    console = Console(record=True, width=120)
    console.print(jobs_table([body], PERIOD, with_tenant=False))
    [row] = [line for line in console.export_text().splitlines() if job_id in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells == [job_id, "train", "H100-80GB/mps", "900.0", "0.90"]

    api.ctx.metering.roll_up_range(T0, T0 + 60 * MINUTE)  # again: replaced, never added
    assert statement(api, TENANT_A) == body


def test_a_job_still_running_is_billed_up_to_the_last_rolled_up_window(api: Api) -> None:
    job_id = run_job(api, TENANT_A, "long", 0 * MINUTE, None)
    api.clock.advance(30 * MINUTE + timedelta(seconds=20))
    api.ctx.metering.catch_up(api.clock.utc_now())  # 30 whole windows
    [job] = statement(api, TENANT_A)["jobs"]
    assert (job["job_id"], job["gpu_seconds"]) == (job_id, "900.0")
    api.clock.advance(30 * MINUTE)
    api.ctx.metering.catch_up(api.clock.utc_now())
    [job] = statement(api, TENANT_A)["jobs"]
    assert job["gpu_seconds"] == "1800.0"
