"""The job runner and the host following the store, through the store only (no processes): the
runner places jobs, the host's desired state takes them with their queue's grace, the host's
reports move them on (exit codes, the times the process ran, retries, stops by gpuplex itself);
a job whose command cannot start here fails alone; a runner that starts decides nothing before
the host has reported; two control planes on one store never both run the jobs."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.core.apply.model import FinishedRun, Phase, WorkloadRecord
from gpuplex.core.jobs.live import attempt_of
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
from gpuplex.store.jobs import Job
from gpuplex.store.spec_revisions import SpecRevisions
from tests.clocks import AheadClock

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
    settings: HostSettings
    clock: AheadClock  # the control plane's: the real one, run ahead by the test

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def now_s(self) -> float:
        return self.ctx.now().timestamp()

    def submit(self, tenant: str, command: list[str], **fields: Any) -> str:
        spec = JobSpec.model_validate(
            {"tenant": tenant, "gpu": {"count": 1}, "command": command, **fields}
        )
        return self.ctx.jobs.submit(spec, now=datetime.now(UTC), actor="test").id

    def job(self, job_id: str) -> Job:
        job = self.ctx.jobs.get(job_id)
        assert job is not None
        return job

    def restarted_host(self) -> RevisionFollower:
        """The host runtime started again: a new follower, whose first pass reports."""
        engine = self.ctx.engine
        self.follower = RevisionFollower(
            AppliedRevisions(SpecRevisions(engine)),
            self.settings,
            None,
            self.ctx.jobs,
            JobReports(engine),
        )
        return self.follower

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
        clock = AheadClock()
        ctx = ServerContext.open(engine, clock)
        apply(ctx.spec_history, SPEC, 0, actor="test")
        settings = HostSettings(state_dir=root / "host", node="box", driver="sim")
        dirs = StateDir(settings.state_dir)
        dirs.create()
        follower = RevisionFollower(
            AppliedRevisions(SpecRevisions(engine)), settings, None, ctx.jobs, JobReports(engine)
        )
        runner = JobRunner(ctx, interval_s=1.0)
        yield Setup(ctx, runner, follower, dirs, store_url, settings, clock)
        runner.release()
        engine.dispose()


def running(desired: DesiredFile, started_at_s: float | None = None) -> HostState:
    """The host's records with every desired replica running."""
    return HostState(
        records=[
            WorkloadRecord(desired=w, phase=Phase.RUNNING, pid=4242, started_at_s=started_at_s)
            for w in desired.host.workloads
        ]
    )


def ended(
    state: HostState, job_id: str, exit_code: int | None, ended_at_s: float, **fields: Any
) -> HostState:
    """`state` with the job's run ended: its record gone, how it ended kept."""
    (gone,) = [r for r in state.records if r.desired.workload == f"job-{job_id}"]
    run = FinishedRun(
        label=gone.label,
        attempt=attempt_of(gone.desired.env),
        started_at_s=gone.started_at_s,
        ended_at_s=ended_at_s,
        exit_code=exit_code,
        **fields,
    )
    return HostState(records=[r for r in state.records if r is not gone], finished=[run])


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
    records = running(desired).records
    records = [
        r.model_copy(update={"phase": Phase.COMPLETED, "pid": None, "last_exit_code": 3})
        if r.desired.workload == f"job-{first}"
        else r
        for r in records
    ]
    setup.follower.after_tick(HostState(records=records))
    setup.runner.pass_once()
    failed = setup.ctx.jobs.get(first)
    assert failed is not None
    assert failed.state is JobState.FAILED
    assert failed.reason == "exited 3"
    assert failed.exit_code == 3
    after = setup.follower.take_newest(HostState(records=records))
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
    other = JobRunner(ServerContext.open(other_engine, SYSTEM_CLOCK), 1.0)
    try:
        job = setup.submit("acme", ["sleep", "60"])
        assert setup.runner.pass_once() is not None  # the first one leads
        assert other.pass_once() is None  # the second waits: it neither places nor moves
        assert setup.state(job) is JobState.STARTING
        setup.runner.release()  # the leader goes (stopped, or killed: the lock goes with it)
        second = setup.submit("bolt", ["sleep", "60"])
        waited = other.pass_once()  # it leads now, but has not heard from box's host yet
        assert waited is not None
        assert waited.transitions == ()
        assert waited.waiting[second] == (
            "waiting for host box's first report since the job runner started"
        )
        host = setup.restarted_host()
        host.take_newest()
        host.after_tick(HostState())
        taken = other.pass_once()
        assert taken is not None
        assert [t.state for t in taken.transitions] == [JobState.STARTING]
    finally:
        other.release()
        other_engine.dispose()


def test_the_attempt_is_billed_from_its_process_start_to_its_end_with_its_exit_code(
    setup: Setup,
) -> None:
    job_id = setup.submit("acme", ["sleep", "60"], backoff_limit=1, backoff_initial_s=100)
    setup.runner.pass_once()
    desired = setup.follower.take_newest()
    assert desired is not None
    (unit,) = desired.host.workloads
    assert unit.env["GPUPLEX_JOB_ATTEMPT"] == "1"
    started = setup.now_s() + 2  # the host starts it 2 s after it was placed
    state = running(desired, started)
    setup.follower.after_tick(state)
    setup.advance(60)
    setup.runner.pass_once()
    assert setup.job(job_id).state is JobState.RUNNING
    ended_at = started + 25.0  # it failed 25 s in; the runner notices 35 s later
    setup.follower.after_tick(ended(state, job_id, 2, ended_at))
    setup.runner.pass_once()
    job = setup.job(job_id)
    assert (job.state, job.attempts, job.failures) == (JobState.QUEUED, 1, 1)
    assert job.reason == "exited 2; retry 1 of 1 after 100 s; queued again as attempt 2"
    assert job.not_before is not None
    assert abs(job.not_before.timestamp() - (ended_at + 100)) < 0.01
    (run,) = setup.ctx.jobs.runs_of(job_id)
    assert run.exit_code == 2
    assert run.end_state is JobState.QUEUED
    assert run.seconds is not None
    assert abs(run.seconds - 25.0) < 0.01  # billed: the time its process ran, to the ms
    assert abs(run.started_at.timestamp() - started) < 0.01
    assert setup.runner.pass_once() is not None
    assert setup.job(job_id).state is JobState.QUEUED  # not before its time


def test_a_job_stopped_by_gpuplex_itself_is_queued_again_as_a_new_attempt(setup: Setup) -> None:
    job_id = setup.submit("acme", ["sleep", "60"])
    setup.runner.pass_once()
    desired = setup.follower.take_newest()
    assert desired is not None
    state = running(desired, datetime.now(UTC).timestamp() - 10)
    setup.follower.after_tick(state)
    setup.runner.pass_once()
    # `up` stops: its `host down` stops the job; the next host runtime reports how it ended
    stopped = ended(state, job_id, 143, datetime.now(UTC).timestamp() - 5, stopped_by="up stopped")
    host = setup.restarted_host()
    assert host.take_newest(stopped) is not None  # the job is not run again under its attempt
    assert host.take_newest(stopped) is None
    forgotten = host.after_tick(stopped)
    assert forgotten == set()  # the runner has not taken it yet
    setup.runner.pass_once()  # queued again, and placed again at once (the GPU is free)
    job = setup.job(job_id)
    assert (job.state, job.attempts, job.failures) == (JobState.STARTING, 1, 0)
    requeued = [e.reason for e in setup.ctx.jobs.events(job_id) if e.state is JobState.QUEUED]
    assert requeued[-1] == ("stopped when gpuplex stopped (up stopped); queued again as attempt 2")
    assert job.exit_code is None  # the job has not ended: the attempt's code is on its run
    assert [r.exit_code for r in setup.ctx.jobs.runs_of(job_id)] == [143, None]
    after = host.take_newest(stopped)  # the new attempt runs: a replica told attempt 2
    assert after is not None
    assert [w.env["GPUPLEX_JOB_ATTEMPT"] for w in after.host.workloads] == ["2"]
    assert host.after_tick(stopped) == {f"acme/job-{job_id}#0"}  # the old end may be forgotten


def test_a_runner_that_starts_waits_for_the_host_before_it_frees_or_preempts(setup: Setup) -> None:
    """A job ended while gpuplex was down: the restarted runner sees it running until the host
    reports, and preempts nobody for a job that can take its GPU once that report is in."""
    done = setup.submit("acme", ["sleep", "60"])
    busy = setup.submit("acme", ["sleep", "60"])
    setup.runner.pass_once()
    desired = setup.follower.take_newest()
    assert desired is not None
    state = running(desired, datetime.now(UTC).timestamp() - 60)
    setup.follower.after_tick(state)
    setup.runner.pass_once()
    setup.runner.release()  # the control plane stops ...
    waiting = setup.submit(
        "bolt", ["sleep", "60"]
    )  # ... a job is queued meanwhile (say, just before)
    later = ended(state, done, 0, datetime.now(UTC).timestamp() - 30)  # and one exited meanwhile
    setup.runner = JobRunner(setup.ctx, interval_s=1.0)
    first = setup.runner.pass_once()
    assert first is not None
    assert first.transitions == ()
    assert "first report" in first.waiting[waiting]
    host = setup.restarted_host()
    host.take_newest(later)
    host.after_tick(later)
    setup.runner.pass_once()
    assert setup.job(done).state is JobState.SUCCEEDED
    assert setup.job(done).exit_code == 0
    assert setup.job(busy).state is JobState.RUNNING  # never preempted
    assert setup.job(waiting).state is JobState.STARTING
