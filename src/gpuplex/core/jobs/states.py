"""The life of a job as a state machine. Pure.

A job is `queued` when submitted. The runner (admission, placement and the host runtime) moves it
on: `starting` when admitted and placed, `running` once its process is up, `preempting` while it
stops for another job (then `queued` again, one attempt more), `stopping` while it stops after a
cancellation or past its max runtime, and at the end one of `succeeded`, `failed`, `cancelled`
or `timed_out`. A finished job never moves again. (The runner's step: `core.jobs.lifecycle`.)

A running job goes back to `queued`, as a new attempt, when its process ended in a way that is not
its own doing, or when it failed and may be retried (`JobSpec.backoff_limit`); how a process ended
is its host's word (`ProcessEnd`).
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
    # back to the queue as a new attempt: stopped by gpuplex itself (`host down`, `up` stopping),
    # lost (gone with no record of how it ended), or failed with retries left
    JobState.RUNNING: frozenset({JobState.PREEMPTING, JobState.STOPPING, JobState.QUEUED})
    | FINISHED_STATES,
    JobState.PREEMPTING: frozenset({JobState.QUEUED}) | FINISHED_STATES,
    JobState.STOPPING: FINISHED_STATES,
    **{state: frozenset() for state in FINISHED_STATES},
}


class ProcessEnd(StrEnum):
    """How a job's process ended, as the host that ran it saw it."""

    #: by itself, with the exit status its launching shell or its parent recorded (or, with none,
    #: why: it could not start, the VRAM watchdog stopped it): the job's own end
    EXITED = "exited"
    #: gpuplex stopped it because it left the host's desired state: preempted, cancelled, past its
    #: max runtime, or gpuplex itself stopping (`gpuplex host down`, `gpuplex up` stopping)
    STOPPED = "stopped"
    #: gone, and nothing recorded how it ended (the host restarted, its records were lost)
    LOST = "lost"


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
