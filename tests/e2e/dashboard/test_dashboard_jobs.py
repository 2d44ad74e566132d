"""Running jobs on the GPU map and in the Tenants panel, in a real chromium: the example applied
with its `queues:`, four jobs holding GPUs (contoso's on a MIG slice of GPU 6, which the applied
plan leaves idle; northwind's on the whole GPU 7; hobbyists' MPS share beside its replicas on GPU
5; fabrikam's starting on a free 1g slot of GPU 4) and one of contoso's that can never start. The
platform admin sees each job where it runs, with its name and state, GPUs 6 and 7 no longer idle,
and each tenant's jobs (running, queued, what they hold) in the Tenants panel, counted in what
the quota binds; the contoso viewer sees its own job and none of the others' ids or names."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuplex.clock import utc_now
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import MigSlicePlan, Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.store.db import open_store
from gpuplex.store.jobs import JobRepository
from tests.e2e.dashboard.stack import ROOT, Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

ARTIFACTS = ROOT / "test-artifacts"
#: job key -> tenant, its GPU request, name, state, GPU index and how it is placed there
JOBS: dict[str, tuple[str, dict[str, Any], str, JobState, int, dict[str, Any]]] = {
    "contoso": (
        "contoso",
        {"mig_profile": "3g.40gb"},
        "finetune",
        JobState.RUNNING,
        6,
        {"mode": Mode.MIG, "mig": ("3g.40gb", 9, 0, 4), "memory_mib": 40_320, "compute": 43},
    ),
    "northwind": (
        "northwind",
        {"count": 1},
        "pretrain",
        JobState.RUNNING,
        7,
        {"mode": Mode.DEDICATED, "memory_mib": 81_559, "compute": 100},
    ),
    "hobbyists": (
        "hobbyists",
        {"memory_gib": 10, "compute_percent": 10},
        "notebook",
        JobState.RUNNING,
        5,
        {"mode": Mode.MPS, "memory_mib": 10_240, "compute": 10, "threads": 10},
    ),
    "fabrikam": (
        "fabrikam",
        {"mig_profile": "1g.10gb"},
        "extract",
        JobState.STARTING,
        4,
        {"mode": Mode.MIG, "mig": ("1g.10gb", 19, 3, 1), "memory_mib": 9_856, "compute": 14},
    ),
}


def _placement(job_id: str, tenant: str, gpu: int, how: dict[str, Any]) -> dict[str, Any]:
    mig = how.get("mig")
    return Placement(
        tenant=tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=how["mode"],
        node="h100-a",
        gpu_indices=[gpu],
        gpu_model="H100-80GB",
        mig=MigSlicePlan(profile=mig[0], profile_id=mig[1], start_slot=mig[2], size_slots=mig[3])
        if mig
        else None,
        memory_mib=how["memory_mib"],
        compute_percent=how["compute"],
        thread_percent=how.get("threads"),
        reason="placed on free capacity",
    ).model_dump(mode="json")


@pytest.fixture(scope="module")
def jobs(stack: Stack) -> dict[str, str]:
    """The four jobs holding GPUs, and contoso's that asks more than its queue's limit."""
    engine = open_store(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}")
    try:
        repo = JobRepository(engine)
        now = utc_now()
        made: dict[str, str] = {}
        for key, (tenant, gpu, name, state, index, how) in JOBS.items():
            spec = JobSpec.model_validate(
                {"tenant": tenant, "name": name, "gpu": gpu, "command": ["python", "train.py"]}
            )
            job_id = repo.submit(spec, now=now, actor="test").id
            placement = _placement(job_id, tenant, index, how)
            repo.transition(job_id, JobState.STARTING, "placed", now=now, placement=placement)
            if state is JobState.RUNNING:
                repo.transition(job_id, JobState.RUNNING, "its process runs", now=now)
            made[key] = job_id
        never = JobSpec.model_validate(
            {"tenant": "contoso", "name": "huge", "gpu": {"memory_gib": 250}, "command": ["x"]}
        )
        made["queued"] = repo.submit(never, now=now, actor="test").id
    finally:
        engine.dispose()
    return made


def _nodes(stack: Stack, token: str) -> dict[str, Any]:
    reply = httpx.get(
        f"{stack.base_url}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert reply.is_success, reply.text
    body: dict[str, Any] = reply.json()
    return body


def _screenshot(page: Page, tmp_path: Path, name: str) -> None:
    shot = tmp_path / f"dashboard-jobs-{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)


def test_the_api_puts_each_job_where_it_runs(stack: Stack, jobs: dict[str, str]) -> None:
    [node] = _nodes(stack, stack.admin_token)["nodes"]
    gpus = {gpu["index"]: gpu for gpu in node["gpus"]}
    for key, (tenant, _, name, state, index, how) in JOBS.items():
        gpu = gpus[index]
        assert gpu["mode"] == how["mode"].value, gpu
        [occupant] = [o for o in gpu["occupants"] if o["job"] and o["job"]["id"] == jobs[key]]
        assert (occupant["tenant"], occupant["workload"]) == (tenant, f"job-{jobs[key]}")
        assert occupant["job"] == {"id": jobs[key], "name": name, "state": state.value}
    assert len(gpus[5]["occupants"]) == 5  # hobbyists' four replicas and its job
    mine = _nodes(stack, stack.contoso_token)["nodes"]
    shown = [o for n in mine for g in n["gpus"] for o in g["occupants"]]
    assert {o["tenant"] for o in shown} == {"contoso"}
    assert [o["job"]["id"] for o in shown if o["job"]] == [jobs["contoso"]]


def test_the_admin_sees_the_jobs_on_the_map_and_in_the_tenants_panel(
    page: Page, stack: Stack, jobs: dict[str, str], tmp_path: Path, page_errors: list[str]
) -> None:
    page.goto(f"/dashboard/#token={stack.admin_token}")
    page.wait_for_selector("[data-testid=gpu-slice]")
    job_slices = page.locator("[data-testid=gpu-slice][data-job]")
    expect(job_slices).to_have_count(4)
    for key, (tenant, _, name, state, index, how) in JOBS.items():
        gpu = page.locator(f"[data-testid=gpu][data-gpu-index='{index}']")
        expect(gpu).to_have_attribute("data-mode", how["mode"].value)  # 6 and 7: not idle
        slice_ = gpu.locator(f"[data-testid=gpu-slice][data-job={jobs[key]}]")
        expect(slice_).to_have_attribute("data-tenant", tenant)
        expect(slice_).to_have_attribute("data-job-state", state.value)
        expect(slice_).to_contain_text(f"job {name}")
        title = slice_.get_attribute("title") or ""
        assert f"{tenant} / job {jobs[key]} ({name}) · {state.value}" in title
    mig_job = page.locator(f"[data-testid=gpu-slice][data-job={jobs['fabrikam']}]")
    assert mig_job.evaluate("e => e.style.left") == "37.5%"  # slot 3 of 8

    rows = page.get_by_test_id("tenants-table")
    contoso = rows.locator("[data-testid=tenant-row][data-tenant=contoso]")
    expect(contoso.get_by_test_id("tenant-jobs-count")).to_have_text("1 running · 1 queued")
    expect(contoso.get_by_test_id("tenant-jobs-held")).to_contain_text("1 x 3g.40gb")
    northwind = rows.locator("[data-testid=tenant-row][data-tenant=northwind]")
    expect(northwind.get_by_test_id("tenant-jobs-count")).to_have_text("1 running")
    expect(northwind).to_contain_text("4.00 of 4.00")  # 3 GPUs of replicas + its job's
    adatum = rows.locator("[data-testid=tenant-row][data-tenant=adatum]")
    expect(adatum.get_by_test_id("tenant-jobs")).to_have_text("\u2013")  # no jobs
    _screenshot(page, tmp_path, "admin")
    assert page_errors == []


def test_the_contoso_viewer_sees_its_own_job_and_nobody_elses(
    page: Page, stack: Stack, jobs: dict[str, str], tmp_path: Path, page_errors: list[str]
) -> None:
    page.goto(f"/dashboard/#token={stack.contoso_token}")
    page.wait_for_selector("[data-testid=gpu-slice]")
    job_slices = page.locator("[data-testid=gpu-slice][data-job]")
    expect(job_slices).to_have_count(1)
    expect(job_slices).to_have_attribute("data-job", jobs["contoso"])
    expect(page.locator("[data-testid=gpu][data-gpu-index='7']")).to_have_count(0)
    page.get_by_test_id("tenant-jobs-count").wait_for()
    html = page.content()
    for key in ("northwind", "hobbyists", "fabrikam"):
        assert jobs[key] not in html, key
        assert JOBS[key][2] not in html, key
    _screenshot(page, tmp_path, "contoso")
    assert page_errors == []
