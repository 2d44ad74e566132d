"""The life of a job as a state machine. Pure.

A job is `queued` when submitted. The runner (admission, placement and the host runtime) moves it
on: `starting` when admitted and placed, `running` once its process is up, `preempting` while it
stops for another job (then `queued` again, one attempt more), `stopping` while it stops after a
cancellation or past its max runtime, and at the end one of `succeeded`, `failed`, `cancelled`
or `timed_out`. A finished job never moves again. (The runner's step: `core.jobs.lifecycle`.)
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    PREEMPTING = "preempting"
    STOPPING = "stopping"  # cancelled or past its max runtime, its process not gone yet
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATES


#: States a job never leaves.
FINISHED_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT}
)
#: States in which a job holds, or is about to hold, GPU capacity.
HOLDING_STATES = frozenset(
    {JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING, JobState.STOPPING}
)
#: States in which a job is out of the live plan but its process may still run.
LEAVING_STATES = frozenset({JobState.PREEMPTING, JobState.STOPPING})
#: Every state the runner still has work to do for.
ACTIVE_STATES = frozenset({JobState.QUEUED}) | HOLDING_STATES

#: Which state may follow which.
NEXT_STATES: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.STARTING, JobState.FAILED, JobState.CANCELLED}),
    # a start that fails before the process is up may go back to the queue; a short job may end
    # (even succeed) before the runner has seen it running; a job starting holds its GPU and may
    # be preempted as a running one
    JobState.STARTING: frozenset(
        {JobState.RUNNING, JobState.QUEUED, JobState.PREEMPTING, JobState.STOPPING}
    )
    | FINISHED_STATES,
    JobState.RUNNING: frozenset({JobState.PREEMPTING, JobState.STOPPING}) | FINISHED_STATES,
    JobState.PREEMPTING: frozenset({JobState.QUEUED}) | FINISHED_STATES,
    JobState.STOPPING: FINISHED_STATES,
    **{state: frozenset() for state in FINISHED_STATES},
}


def may_move(old: JobState, new: JobState) -> bool:
    """May a job in `old` move to `new`?"""
    return new in NEXT_STATES[old]


def transition_refusal(old: JobState, new: JobState) -> str | None:
    """Why a job in `old` may not move to `new`, in plain words; None when it may."""
    if may_move(old, new):
        return None
    if old.finished:
        return f"the job is {old.value}: a finished job does not change state"
    allowed = ", ".join(sorted(s.value for s in NEXT_STATES[old]))
    return f"a {old.value} job cannot become {new.value} (it can become: {allowed})"
