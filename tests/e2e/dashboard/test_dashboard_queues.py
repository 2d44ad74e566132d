"""The queues panel in a real chromium: the example spec with `queues:` applied, jobs in the store
(one running on a MIG slice, one preempting, two waiting at their tenant's limit); the platform
admin sees every queue with its guarantee, use and limit, both waiting jobs with why each waits in
plain words and where the others run; the contoso viewer sees contoso's queue (and its team and
organisation as numbers), its own jobs and reasons, and no other tenant's."""

from __future__ import annotations

import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import Engine

from gpuplex.clock import utc_now
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import MigSlicePlan, Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.store.db import open_store
from gpuplex.store.job_reports import JobReports
from gpuplex.store.jobs import JobRepository
from gpuplex.store.leader import try_lead
from gpuplex.store.locks import StoreLock
from tests.e2e.dashboard.stack import ROOT, SPEC, Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.lane]

ARTIFACTS = ROOT / "test-artifacts"
#: contoso may hold 3 of the 3g.40gb slices (its support-bot holds 2); hobbyists 64 GiB of shared
#: memory (its playground holds 48); northwind is guaranteed 3 whole GPUs.
QUEUES_YAML = """
queues:
  preemption: {min_runtime_s: 0}
  organisations:
    - name: retail
      teams:
        - name: assistants
          tenants:
            - name: contoso
              guarantee: {gpu_memory_gib: 40, mig: {3g.40gb: 2}}
              limit: {mig: {3g.40gb: 3}}
            - name: hobbyists
              limit: {gpu_memory_gib: 64, compute_percent: 120}
    - name: enterprise
      teams:
        - name: premium
          tenants:
            - name: northwind
              guarantee: {gpus: 3}
            - name: fabrikam
"""
CONTOSO_WAITS = "contoso would pass its limit: 3 MIG 3g.40gb slices held + 1 asked > 3"
HOBBYISTS_WAIT = "hobbyists would pass its limit: 48 GiB of GPU memory held + 40 asked > 64"
OTHERS = ("hobbyists", "northwind", "fabrikam", "enterprise", "premium")


def with_queues(queues_yaml: str) -> str:
    """The example spec with its `queues:` section replaced by `queues_yaml`'s."""
    spec = yaml.safe_load(SPEC.read_text())
    spec["queues"] = yaml.safe_load(queues_yaml)["queues"]
    return yaml.safe_dump(spec, sort_keys=False)


def _api(stack: Stack, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    reply = httpx.request(
        method,
        f"{stack.base_url}/api/v1{path}",
        headers={"Authorization": f"Bearer {token or stack.admin_token}"},
        json=body,
        timeout=30,
    )
    assert reply.is_success, reply.text
    return reply.json()


def _placement(job_id: str, tenant: str, gpu: int, mode: Mode, mig: str | None) -> dict[str, Any]:
    slice_plan = (
        MigSlicePlan(profile=mig, profile_id=9, start_slot=0, size_slots=4) if mig else None
    )
    return Placement(
        tenant=tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=mode,
        node="h100-a",
        gpu_indices=[gpu],
        gpu_model="H100-80GB",
        mig=slice_plan,
        memory_mib=40_320 if mig else 81_559,
        compute_percent=43 if mig else 100,
        reason="placed on free capacity",
    ).model_dump(mode="json")


@pytest.fixture(scope="module")
def jobs(stack: Stack) -> dict[str, str]:
    """The spec with queues applied, and the jobs: contoso's running on a 3g.40gb slice of GPU 6
    and one waiting at its limit; northwind's preempting on GPU 7; hobbyists' waiting at its
    limit."""
    current = _api(stack, "GET", "/spec")
    applied = _api(
        stack,
        "POST",
        "/spec/apply",
        {"spec_yaml": with_queues(QUEUES_YAML), "base_revision": current["revision"]},
    )
    engine = open_store(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}")
    try:
        repo = JobRepository(engine)
        now = utc_now()

        def submit(tenant: str, gpu: dict[str, Any], name: str) -> str:
            spec = JobSpec.model_validate(
                {"tenant": tenant, "name": name, "gpu": gpu, "command": ["python", "train.py"]}
            )
            return repo.submit(spec, now=now, actor="test").id

        made = {
            "c_run": submit("contoso", {"mig_profile": "3g.40gb"}, "finetune"),
            "n_run": submit("northwind", {"count": 1}, "pretrain"),
            "c_wait": submit("contoso", {"mig_profile": "3g.40gb"}, "eval"),
            "h_wait": submit("hobbyists", {"memory_gib": 40, "compute_percent": 30}, "notebook"),
        }
        for key, tenant, gpu, mode, mig in (
            ("c_run", "contoso", 6, Mode.MIG, "3g.40gb"),
            ("n_run", "northwind", 7, Mode.DEDICATED, None),
        ):
            placement = _placement(made[key], tenant, gpu, mode, mig)
            repo.transition(made[key], JobState.STARTING, "admitted", now=now, placement=placement)
            repo.transition(made[key], JobState.RUNNING, "its process is up", now=now)
        repo.transition(made["n_run"], JobState.PREEMPTING, "reclaimed for a guarantee", now=now)
        _report_as_the_host_until_heard(stack, engine, host_started=now)
    finally:
        engine.dispose()
    assert applied["revision"] == current["revision"] + 1
    return made


def _report_as_the_host_until_heard(stack: Stack, engine: Engine, host_started: datetime) -> None:
    """The stack runs no host runtime: report for its node as a host does, every so often, until
    the job runner has heard it. The runner decides nothing on a node whose host has not reported
    since the runner took its lead, and it takes its lead on its first pass, a few seconds after
    the server starts: a report written once, before that, counts for nothing (in CI one did)."""
    deadline = time.monotonic() + 60
    while (ours := try_lead(engine, StoreLock.JOB_RUNNER)) is not None:  # not the server's yet
        ours.release()
        assert time.monotonic() < deadline, "the server's job runner never took its lead"
        time.sleep(0.2)
    reports = JobReports(engine)
    while True:
        reports.write([], now=utc_now(), host=("h100-a", host_started))
        reasons = [j["waiting_reason"] for j in _api(stack, "GET", "/queues")["jobs"]]
        if not any(r and "first report since" in r for r in reasons):
            return
        assert time.monotonic() < deadline, f"the job runner never heard the host: {reasons}"
        time.sleep(0.2)


def _open(page: Page, token: str) -> None:
    page.goto(f"/dashboard/#token={token}")
    page.wait_for_selector("[data-testid=queue-row]")


def _screenshot(page: Page, tmp_path: Path, name: str) -> None:
    shot = tmp_path / f"dashboard-queues-{name}.png"
    page.get_by_test_id("queues-panel").screenshot(path=str(shot))
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)


def test_the_admin_sees_every_queue_and_why_each_job_waits(
    page: Page, stack: Stack, jobs: dict[str, str], tmp_path: Path, page_errors: list[str]
) -> None:
    reply = _api(stack, "GET", "/queues")
    reasons = {j["id"]: j["waiting_reason"] for j in reply["jobs"]}
    assert reasons[jobs["c_wait"]] == CONTOSO_WAITS
    assert reasons[jobs["h_wait"]] == HOBBYISTS_WAIT

    _open(page, stack.admin_token)
    panel = page.get_by_test_id("queues-panel")
    rows = panel.locator("[data-testid=queue-row]")
    expect(rows).to_have_count(9)  # the cluster, 2 organisations, 2 teams, 4 tenants
    names = rows.evaluate_all("els => els.map(e => e.dataset.queue)")
    assert names == [
        "cluster",
        "retail",
        "assistants",
        "contoso",
        "hobbyists",
        "enterprise",
        "premium",
        "northwind",
        "fabrikam",
    ]
    contoso = panel.locator("[data-testid=queue-row][data-queue=contoso]")
    expect(contoso).to_contain_text("1 running · 1 queued")
    mig = contoso.locator("tr", has=page.locator("[data-kind='mig:3g.40gb']"))
    expect(mig).to_contain_text("MIG 3g.40gb")
    expect(mig.get_by_test_id("queue-in-use")).to_have_text("3 slices")
    expect(mig).to_contain_text("2 slices")  # guaranteed
    expect(mig.get_by_test_id("queue-borrowed")).to_have_text("1 slice")
    northwind = panel.locator("[data-testid=queue-row][data-queue=northwind]")
    gpus = northwind.locator("tr", has=page.locator("[data-kind=gpus]"))
    expect(gpus.get_by_test_id("queue-in-use")).to_have_text("4")  # 3 replicas' GPUs + the job

    waiting = panel.locator("[data-testid=queued-job]")
    expect(waiting).to_have_count(2)
    contoso_wait = panel.locator(f"[data-testid=queued-job][data-job={jobs['c_wait']}]")
    expect(contoso_wait.get_by_test_id("waiting-reason")).to_have_text(CONTOSO_WAITS)
    expect(contoso_wait).to_contain_text("eval")
    hobbyists_wait = panel.locator(f"[data-testid=queued-job][data-job={jobs['h_wait']}]")
    expect(hobbyists_wait.get_by_test_id("waiting-reason")).to_have_text(HOBBYISTS_WAIT)
    expect(hobbyists_wait).to_contain_text("GPU memory 40 GiB")

    running = panel.locator(f"[data-testid=holding-job][data-job={jobs['c_run']}]")
    expect(running).to_have_attribute("data-state", "running")
    expect(running.get_by_test_id("job-where")).to_have_text("h100-a GPU 6 · MIG 3g.40gb")
    leaving = panel.locator(f"[data-testid=holding-job][data-job={jobs['n_run']}]")
    expect(leaving).to_have_attribute("data-state", "preempting")
    expect(leaving.get_by_test_id("job-where")).to_have_text("h100-a GPU 7 · whole GPU")
    _screenshot(page, tmp_path, "admin")
    assert page_errors == []


def test_the_contoso_viewer_sees_only_its_own_queue_and_jobs(
    page: Page, stack: Stack, jobs: dict[str, str], tmp_path: Path, page_errors: list[str]
) -> None:
    _open(page, stack.contoso_token)
    panel = page.get_by_test_id("queues-panel")
    rows = panel.locator("[data-testid=queue-row]")
    expect(rows).to_have_count(3)
    assert rows.evaluate_all("els => els.map(e => e.dataset.queue)") == [
        "retail",
        "assistants",
        "contoso",
    ]
    waiting = panel.locator("[data-testid=queued-job]")
    expect(waiting).to_have_count(1)
    expect(waiting.get_by_test_id("waiting-reason")).to_have_text(CONTOSO_WAITS)
    holding = panel.locator("[data-testid=holding-job]")
    expect(holding).to_have_count(1)
    expect(holding).to_have_attribute("data-job", jobs["c_run"])
    text = panel.inner_text()
    for name in (*OTHERS, jobs["n_run"], jobs["h_wait"], HOBBYISTS_WAIT):
        assert name not in text, name
    _screenshot(page, tmp_path, "contoso")
    assert page_errors == []
