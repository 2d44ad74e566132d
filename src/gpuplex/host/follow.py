"""`gpuplex host run --follow-store`: the host runs the control plane's applied revision, and the
jobs the runner placed on it.

Each pass asks the store for the newest revision (one indexed query) and the jobs that hold GPUs
(another). When either changed, the revision with the jobs this host runs (host/job_reports.py:
`runs_here`; a `starting` job once for the attempt the store names, a `running` one only while its
process runs here) placed on this node (core.jobs.live) becomes this host's desired state, with every placement exactly as planned
or placed (this module never plans), is written to desired.json (what `host status` and a
restarted supervisor read), and is reconciled on the same pass. A revision this host cannot run
(its node missing, ports that clash, a command that cannot start) is refused with an event, and the
previous one keeps running; a job whose command cannot start here fails alone, with the reason,
and never holds back the revision or other tenants' jobs.

After each pass the host reports, for each job on it, whether its process runs or how it ended
(host/job_reports.py): that is what the runner moves jobs on by. With its first reports, and at
least every HEARTBEAT_S after, it says that this node's host reported (`host_reports`): the runner
decides nothing on this node's jobs until it has heard from it since the runner started. Once the
runner has moved a job on, how its run ended is forgotten here. Before the processes, on the same
cadence, it reports its new events and the tail of its jobs' output (host/output_reports.py): the
control plane reads those from the store, never from this host's state folder.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuplex.clock import monotonic_s, utc_now
from gpuplex.core.jobs.live import LiveJob, live_revision
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import HOLDING_STATES, LEAVING_STATES
from gpuplex.core.plan.model import Placement
from gpuplex.core.plural import counted
from gpuplex.core.queues.tree import queue_tree
from gpuplex.errors import GpuplexError, NotFoundError
from gpuplex.host.job_reports import done_with, job_reports, placed_on, runs_here
from gpuplex.host.output_reports import OutputReporter
from gpuplex.host.session import SpecTransform, choose_node, desired_file
from gpuplex.host.state import DesiredFile, Event, HostState, StateDir
from gpuplex.revision import AppliedRevision, AppliedRevisions
from gpuplex.settings import HostSettings
from gpuplex.store.job_reports import JobReport, JobReports
from gpuplex.store.jobs import Job, JobRepository

log = logging.getLogger(__name__)

#: (revision, the live jobs on this node with their attempts): what the desired state follows
Taken = tuple[int, tuple[tuple[str, int], ...]]
#: A host says it is there at least this often, with or without news of its jobs.
HEARTBEAT_S = 2.0


class RevisionFollower:
    def __init__(
        self,
        revisions: AppliedRevisions,
        settings: HostSettings,
        transform: SpecTransform | None = None,
        jobs: JobRepository | None = None,
        reports: JobReports | None = None,
        output: OutputReporter | None = None,
    ) -> None:
        self._revisions = revisions
        self._settings = settings
        self._dirs = StateDir(settings.state_dir)
        self._transform = transform
        self._jobs = jobs
        self._reports = reports
        self._output = output
        self.taken: Taken | None = None  # the newest state looked at, run or refused
        self._node: str | None = None
        self._holding: list[Job] = []  # jobs that hold GPUs on this node, as last read
        self._refused: dict[str, str] = {}  # job id -> why this host cannot run it
        self._reported: dict[str, JobReport] = {}
        self._started_at = utc_now()  # this host runtime's start, said with each heartbeat
        self._beat_at: float | None = None  # monotonic time of the last heartbeat written

    def take_newest(self, state: HostState | None = None) -> DesiredFile | None:
        """The desired state of a revision (or set of live jobs) newer than the last one taken,
        written to desired.json; None when there is none, or when it cannot run here (an event
        says why). `state`: what this host runs now, and how its jobs' runs ended (None:
        nothing)."""
        state = state if state is not None else HostState()
        try:
            applied = self._revisions.get()
            if applied is None:
                return None
            self._node = _node_of(applied, self._settings)
            self._holding = self._holding_jobs(self._node) if self._node else []
            holding = {j.id for j in self._holding}
            self._refused = {k: v for k, v in self._refused.items() if k in holding}
        except GpuplexError as error:  # the store is away: ask again on the next pass
            log.warning("cannot read the applied revision or the jobs: %s", error.message)
            return None
        live = [
            j
            for j in self._holding
            if j.state not in LEAVING_STATES and runs_here(j, state.records, state.finished)
        ]
        taken: Taken = (applied.revision, tuple(sorted((j.id, j.attempts) for j in live)))
        if taken == self.taken:
            return None
        self.taken = taken
        return self._desired(applied, live)

    def after_tick(self, state: HostState) -> set[str]:
        """Tell the runner what this pass saw of the jobs' processes (only what changed), and
        that this host reported; returns the replicas whose finished runs the runner no longer
        needs."""
        if self._reports is None or self._node is None:
            return set()
        node = self._node
        reports = job_reports(node, self._holding, state.records, state.finished, self._refused)
        if self._output is not None:  # before the ends are told: a job moved on has its logs
            try:
                ended = {r.job_id for r in reports if not r.alive}
                self._output.report(node, self._holding, ended)
            except GpuplexError as error:
                log.warning("cannot report the jobs' logs or the events: %s", error.message)
        now = [r for r in reports if self._reported.get(r.job_id) != r]
        beat = self._beat_at is None or monotonic_s() - self._beat_at >= HEARTBEAT_S
        host = (node, self._started_at) if beat else None
        try:
            self._reports.write(now, now=utc_now(), host=host)
        except GpuplexError as error:
            log.warning("cannot report the jobs' processes: %s", error.message)
            return set()
        if beat:
            self._beat_at = monotonic_s()
        self._reported.update({r.job_id: r for r in now})
        holding = {j.id for j in self._holding}
        self._reported = {k: v for k, v in self._reported.items() if k in holding}
        return done_with(node, self._holding, state.finished)

    def _holding_jobs(self, node: str) -> list[Job]:
        if self._jobs is None:
            return []
        return [j for j in self._jobs.list(states=HOLDING_STATES) if placed_on(j, node)]

    def _desired(self, applied: AppliedRevision, live: Sequence[Job]) -> DesiredFile | None:
        target = f"revision {applied.revision}"
        spec, plan = applied.spec, applied.plan
        if self._transform is not None:  # stand-ins for the spec's commands, never for jobs'
            spec = self._transform(spec, plan)
        tree = queue_tree(applied.spec)
        running = [j for j in live if j.id not in self._refused]
        try:
            while True:
                jobs = [
                    LiveJob(j.id, j.spec, Placement.model_validate(j.placement), j.attempts)
                    for j in running
                ]
                run_spec, run_plan = live_revision(spec, plan, tree, jobs)
                sha256, settings = applied.spec_sha256, self._settings
                desired, problems, unreadable = desired_file(
                    run_spec, run_plan, applied.revision, sha256, target, settings
                )
                problems += [u.line() for u in unreadable]
                refused = _refused_jobs(running, problems)
                if not refused:
                    break
                self._refuse(refused)
                running = [j for j in running if j.id not in refused]
        except GpuplexError as error:
            self._event("revision_refused", target, f"not run here: {error.message}")
            return None
        if problems:
            self._event("revision_refused", target, "not run here: " + "; ".join(problems))
            return None
        self._dirs.write_desired(desired)
        replicas = len(desired.host.workloads)
        jobs_here = f", {len(running)} of them {'a job' if len(running) == 1 else 'jobs'}"
        jobs_here = jobs_here if running else ""
        self._event(
            "revision",
            target,
            f"running it: {counted(replicas, 'replica')} on this node{jobs_here}",
        )
        return desired

    def _refuse(self, refused: dict[str, str]) -> None:
        for job_id, why in refused.items():
            self._refused[job_id] = why
            self._event("job_refused", f"job {job_id}", f"not run here: {why}")

    def _event(self, kind: str, target: str, message: str) -> None:
        self._dirs.append_event(Event(at=utc_now(), kind=kind, target=target, message=message))


def _node_of(applied: AppliedRevision, settings: HostSettings) -> str | None:
    """This host's node in the revision's fleet; None when it has none (the revision is then
    refused, saying why)."""
    try:
        return choose_node(applied.spec, settings.node).name
    except NotFoundError:
        return None


def _refused_jobs(jobs: Sequence[Job], problems: Sequence[str]) -> dict[str, str]:
    """The jobs that `problems` (launch_problems: `tenant/workload: ...`) name."""
    refused: dict[str, str] = {}
    for job in jobs:
        prefix = f"{job.tenant}/{job_workload_name(job.id)}: "
        for problem in problems:
            if problem.startswith(prefix):
                refused[job.id] = problem.removeprefix(prefix)
    return refused
