"""The job runner and the host following the store, through the store only (no processes): the
runner places jobs, the host's desired state takes them with their queue's grace, the host's
reports move them on; a job whose command cannot start here fails alone; two control planes on
one store never both run the jobs."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuplex.core.apply.model import Phase, WorkloadRecord
from gpuplex.core.jobs.states import JobState
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.host.follow import RevisionFollower
from gpuplex.host.state import DesiredFile, HostState, StateDir
from gpuplex.revision import AppliedRevisions
from gpuplex.server.context import ServerContext
from gpuplex.server.job_runner import JobRunner
from gpuplex.server.spec_apply import apply
from gpuplex.settings import HostSettings
from gpuplex.store.db import open_store
from gpuplex.store.job_reports import JobReports
from gpuplex.store.spec_revisions import SpecRevisions

SPEC = """
fleet:
  nodes: [{name: box, gpus: [{model: H100-80GB, count: 2}]}]
tenants:
  - {name: acme, isolation: dedicated, workloads: []}
  - {name: bolt, isolation: dedicated, workloads: []}
queues:
  preemption: {grace_s: 7}
  organisations:
    - name: lab
      teams:
        - name: all
          tenants: [{name: acme}, {name: bolt}]
"""


@dataclass
class Setup:
    ctx: ServerContext
    runner: JobRunner
    follower: RevisionFollower
    dirs: StateDir
    store_url: str

    def submit(self, tenant: str, command: list[str]) -> str:
        spec = JobSpec.model_validate({"tenant": tenant, "gpu": {"count": 1}, "command": command})
        return self.ctx.jobs.submit(spec, now=datetime.now(UTC), actor="test").id

    def state(self, job_id: str) -> JobState:
        job = self.ctx.jobs.get(job_id)
        assert job is not None
        return job.state


@pytest.fixture
def setup() -> Iterator[Setup]:
    # under /tmp, open to all: tenants run as their own users and must be able to enter it
    with tempfile.TemporaryDirectory(prefix="gpuplex-jobs-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        store_url = f"sqlite:///{root / 'gpuplex.db'}"
        engine = open_store(store_url)
        ctx = ServerContext.open(engine, lambda: datetime.now(UTC), None)
        apply(ctx, SPEC, 0, actor="test")
        settings = HostSettings(state_dir=root / "host", node="box", driver="sim")
        dirs = StateDir(settings.state_dir)
        dirs.create()
        follower = RevisionFollower(
            AppliedRevisions(SpecRevisions(engine)), settings, None, ctx.jobs, JobReports(engine)
        )
        runner = JobRunner(ctx, interval_s=1.0)
        yield Setup(ctx, runner, follower, dirs, store_url)
        runner.release()
        engine.dispose()


def running(desired: DesiredFile) -> HostState:
    """The host's records with every desired replica running."""
    return HostState(
        records=[
            WorkloadRecord(desired=w, phase=Phase.RUNNING, pid=4242) for w in desired.host.workloads
        ]
    )


def test_placed_jobs_reach_the_host_with_their_grace_and_its_reports_move_them_on(
    setup: Setup,
) -> None:
    first = setup.submit("acme", ["sleep", "60"])
    second = setup.submit("bolt", ["sleep", "60"])
    step = setup.runner.pass_once()
    assert step is not None
    assert {setup.state(first), setup.state(second)} == {JobState.STARTING}
    desired = setup.follower.take_newest()
    assert desired is not None
    units = {w.workload: w for w in desired.host.workloads}
    assert set(units) == {f"job-{first}", f"job-{second}"}
    assert {w.restart.stop_grace_s for w in units.values()} == {7}  # the queue's grace
    assert len({tuple(w.binding.gpu_indices) for w in units.values()}) == 2  # one GPU each
    assert setup.follower.take_newest() is None  # nothing changed

    setup.follower.after_tick(running(desired))
    setup.runner.pass_once()
    assert {setup.state(first), setup.state(second)} == {JobState.RUNNING}

    # the first one exits 3: the host reports it, the runner fails it and frees its GPU
    ended = running(desired).records
    ended = [
        r.model_copy(update={"phase": Phase.COMPLETED, "pid": None, "last_exit_code": 3})
        if r.desired.workload == f"job-{first}"
        else r
        for r in ended
    ]
    setup.follower.after_tick(HostState(records=ended))
    setup.runner.pass_once()
    failed = setup.ctx.jobs.get(first)
    assert failed is not None
    assert failed.state is JobState.FAILED
    assert failed.reason == "exited 3"
    after = setup.follower.take_newest()
    assert after is not None
    assert [w.workload for w in after.host.workloads] == [f"job-{second}"]


def test_a_job_whose_command_cannot_start_here_fails_alone(setup: Setup) -> None:
    broken = setup.submit("acme", ["/nonexistent/train.sh"])
    fine = setup.submit("bolt", ["sleep", "60"])
    setup.runner.pass_once()
    desired = setup.follower.take_newest()
    assert desired is not None
    assert [w.workload for w in desired.host.workloads] == [f"job-{fine}"]
    setup.follower.after_tick(running(desired))
    setup.runner.pass_once()
    job = setup.ctx.jobs.get(broken)
    assert job is not None
    assert job.state is JobState.FAILED
    assert "/nonexistent/train.sh" in job.reason
    assert setup.state(fine) is JobState.RUNNING
    path = setup.dirs.root / "events.jsonl"
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert "job_refused" in kinds
    assert "revision_refused" not in kinds


def test_two_control_planes_on_one_store_never_both_run_the_jobs(setup: Setup) -> None:
    other_engine = open_store(setup.store_url)
    other = JobRunner(ServerContext.open(other_engine, lambda: datetime.now(UTC), None), 1.0)
    try:
        job = setup.submit("acme", ["sleep", "60"])
        assert setup.runner.pass_once() is not None  # the first one leads
        assert other.pass_once() is None  # the second waits: it neither places nor moves
        assert setup.state(job) is JobState.STARTING
        setup.runner.release()  # the leader goes (stopped, or killed: the lock goes with it)
        setup.submit("bolt", ["sleep", "60"])
        taken = other.pass_once()
        assert taken is not None
        assert [t.state for t in taken.transitions] == [JobState.STARTING]
    finally:
        other.release()
        other_engine.dispose()
