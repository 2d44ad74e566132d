"""The job state machine: every state has its next states, finished ones have none, and the moves
the store allows and refuses, with the refusal in plain words."""

from __future__ import annotations

import pytest

from gpuplex.core.jobs.states import (
    ACTIVE_STATES,
    FINISHED_STATES,
    NEXT_STATES,
    JobState,
    may_move,
    transition_refusal,
)


def test_every_state_has_its_next_states_and_finished_ones_have_none() -> None:
    assert set(NEXT_STATES) == set(JobState)
    for state in FINISHED_STATES:
        assert NEXT_STATES[state] == frozenset()
        assert state.finished
    assert ACTIVE_STATES.isdisjoint(FINISHED_STATES)
    assert set(JobState) == ACTIVE_STATES | FINISHED_STATES


@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        (JobState.QUEUED, JobState.STARTING, True),
        (JobState.QUEUED, JobState.CANCELLED, True),
        (JobState.QUEUED, JobState.RUNNING, False),
        (JobState.STARTING, JobState.RUNNING, True),
        (JobState.STARTING, JobState.QUEUED, True),
        (JobState.RUNNING, JobState.PREEMPTING, True),
        (JobState.RUNNING, JobState.TIMED_OUT, True),
        (JobState.RUNNING, JobState.QUEUED, True),  # a new attempt: retried, stopped, lost
        (JobState.RUNNING, JobState.STARTING, False),
        (JobState.PREEMPTING, JobState.QUEUED, True),
        (JobState.SUCCEEDED, JobState.QUEUED, False),
        (JobState.CANCELLED, JobState.CANCELLED, False),
    ],
)
def test_moves(old: JobState, new: JobState, allowed: bool) -> None:
    assert may_move(old, new) is allowed
    refusal = transition_refusal(old, new)
    assert (refusal is None) is allowed
    if old.finished:
        assert refusal is not None
        assert "finished" in refusal
