"""The job runner: every few seconds, one lifecycle step (gpuplex.core.jobs.lifecycle) over the
jobs in the store and what the hosts report of their processes, and its state changes written
back, each with its job event and audit entry.

The store is the truth: the runner keeps nothing between passes, so a control plane restarted (or
killed with -9) picks up where it was, and no job is lost or run twice. The host runtimes read the
same jobs (`host run --follow-store`) and run each `starting` or `running` one where it was
placed; a job leaves the host's desired state as it becomes `preempting` or `stopping`, and the
host stops it with SIGTERM, then SIGKILL after its queue's grace period.

Only one runner acts on a store at a time (store/leader.py): a second control plane on the same
store waits, and takes over if the first one dies.

The one thing a runner keeps is when it took the lead: until a node's host has reported since
then (`store.job_reports.HostReport`), what the store says of that node's jobs may be older than
what happened meanwhile (a job that exited while gpuplex was down still holds its GPU there), so
the step decides nothing on it (`unheard`), for at most `FIRST_REPORT_WAIT_S`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from gpuplex.clock import Clock
from gpuplex.core.jobs.lifecycle import JobRecord, LifecycleStep, Transition, step
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import JobState
from gpuplex.core.meter.allocation import gpu_share
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.queues.tree import queue_tree
from gpuplex.errors import JobStateError
from gpuplex.retry import run_pass
from gpuplex.revision import AppliedRevisions
from gpuplex.server.context import JobRunnerLead, ServerContext
from gpuplex.server.job_usage import decayed_job_usage
from gpuplex.store.job_reports import HostReport, JobReport, JobReports
from gpuplex.store.jobs import Job, JobRepository
from gpuplex.store.leader import Leadership, try_lead
from gpuplex.store.locks import StoreLock

log = logging.getLogger("gpuplex.server.jobs")

#: How long a runner that just took the lead waits for a host that holds jobs to report before it
#: decides on what the store says anyway: a host runtime gone for good must not stop every other
#: node's jobs for ever (its own jobs stay as they are until it reports).
FIRST_REPORT_WAIT_S = 120.0


def unheard_nodes(
    nodes: Collection[str], hosts: Mapping[str, HostReport], since: datetime | None, now: datetime
) -> set[str]:
    """The `nodes` whose host has not reported since `since` (the runner took the lead); none
    once the runner has waited FIRST_REPORT_WAIT_S, or when it does not lead."""
    if since is None or (now - since).total_seconds() > FIRST_REPORT_WAIT_S:
        return set()
    return {n for n in nodes if (heard := hosts.get(n)) is None or heard.reported_at < since}


def job_record(job: Job, report: JobReport | None) -> JobRecord:
    """A stored job, with its host's report when that report is about this attempt."""
    seen = report if report is not None and report.attempt == job.attempts else None
    stopping_to = None
    if job.state is JobState.STOPPING:
        stopping_to = JobState.CANCELLED if job.cancel_requested else JobState.TIMED_OUT
    return JobRecord(
        id=job.id,
        job=job.spec,
        state=job.state,
        submitted_s=job.submitted_at.timestamp(),
        started_s=job.started_at.timestamp() if job.started_at is not None else None,
        placement=Placement.model_validate(job.placement) if job.placement else None,
        preempted_for=job.preempted_for,
        cancel_requested=job.cancel_requested,
        alive=seen.alive if seen is not None else None,
        exit_code=seen.exit_code if seen is not None else None,
        stopping_to=stopping_to,
        exit_note=seen.note if seen is not None else None,
        attempt=job.attempts,
        failures=job.failures,
        not_before_s=job.not_before.timestamp() if job.not_before is not None else None,
        process_started_s=_seconds(seen.started_at) if seen is not None else None,
        ended_s=_seconds(seen.ended_at) if seen is not None else None,
        end=seen.end if seen is not None else None,
    )


def _seconds(at: datetime | None) -> float | None:
    return at.timestamp() if at is not None else None


@dataclass(frozen=True, slots=True)
class JobStepInputs:
    """What the runner's next step is worked out from: the applied revision, the jobs, what the
    hosts report of them, since when this process leads, and the clock."""

    current: AppliedRevisions
    jobs: JobRepository
    reports: JobReports
    lead: JobRunnerLead
    clock: Clock


def job_step_inputs(ctx: ServerContext) -> JobStepInputs:
    """The runner's inputs among the server's parts."""
    return JobStepInputs(
        current=ctx.current,
        jobs=ctx.jobs,
        reports=JobReports(ctx.engine),
        lead=ctx.job_runner_lead,
        clock=ctx.clock,
    )


def next_step(inputs: JobStepInputs) -> LifecycleStep | None:
    """The step the runner would take now, read-only: what `job show` explains a wait by, and
    what the runner writes. None when nothing is applied, there are no queues, or no jobs."""
    applied = inputs.current.get()
    tree = queue_tree(applied.spec) if applied is not None else None
    if applied is None or tree is None:
        return None
    jobs = inputs.jobs.active()
    if not jobs:
        return None
    seen = inputs.reports.of([j.id for j in jobs])
    records = [job_record(j, seen.get(j.id)) for j in jobs]
    now = inputs.clock.utc_now()
    nodes = [n.name for n in applied.spec.fleet.nodes]
    unheard = unheard_nodes(nodes, inputs.reports.hosts(), inputs.lead.since, now)
    usage = decayed_job_usage(inputs.jobs, tree, now)  # fair share over time
    return step(applied.spec, applied.plan, tree, records, now.timestamp(), unheard, usage=usage)


class JobRunner(threading.Thread):
    def __init__(self, ctx: ServerContext, interval_s: float) -> None:
        super().__init__(name="gpuplex-job-runner", daemon=True)
        self.ctx = ctx
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.inputs = job_step_inputs(ctx)
        self._lead: Leadership | None = None

    def run(self) -> None:
        try:
            while not self.stopping.wait(self.interval_s):
                run_pass(self.pass_once, job="job runner", retry_in_s=self.interval_s, log=log)
        finally:
            self.release()

    def release(self) -> None:
        """Let another control plane run the jobs."""
        if self._lead is not None:
            self._lead.release()
            self._lead = None
        self.ctx.job_runner_lead.since = None

    def pass_once(self) -> LifecycleStep | None:
        """One step, written to the store; None when this process does not lead, or there are
        no queues (no job can be submitted then)."""
        if self._lead is None or not self._lead.held():
            if self._lead is not None:
                log.warning("lost the job runner's lead (store connection gone): taking it again")
                self._lead.release()
            self._lead = try_lead(self.ctx.engine, StoreLock.JOB_RUNNER)
            if self._lead is None:
                self.ctx.job_runner_lead.since = None
                return None  # another control plane runs the jobs
            self.ctx.job_runner_lead.since = self.ctx.now()  # hosts' reports count from now
        result = next_step(self.inputs)
        if result is None:
            return None
        for change in result.transitions:
            self._write(change, result.live_plan)
        return result

    def _write(self, change: Transition, live_plan: Plan) -> None:
        placement = change.placement
        try:
            self.ctx.jobs.transition(
                change.job_id,
                change.state,
                change.reason,
                now=self.ctx.now(),
                exit_code=change.exit_code,
                placement=placement.model_dump(mode="json") if placement else None,
                gpu_share=job_gpu_share(change, live_plan),
                preempted_for=change.preempted_for,
                started_at=_utc(change.started_s),
                ended_at=_utc(change.ended_s),
                not_before=_utc(change.not_before_s),
                counts_failure=change.counts_failure,
            )
        except JobStateError as error:  # cancelled meanwhile, say: the next pass sees it
            log.warning("job %s: %s", change.job_id, error.message)
            return
        log.info("job %s: %s (%s)", change.job_id, change.state.value, change.reason)


def job_gpu_share(change: Transition, live_plan: Plan) -> Decimal | None:
    """The share of a GPU a job placed by `change` is billed for, as a replica placed alike."""
    if change.placement is None:
        return None
    placement = change.placement.model_copy(
        update={"workload": job_workload_name(change.job_id), "replica": 0}
    )
    return gpu_share(placement, live_plan)


def _utc(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None
