"""Why queued jobs wait, from the admission rules run read-only over the plan's replicas and the
jobs that hold capacity; and the job state machine's moves."""

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
from gpuplex.core.jobs.waiting import ADMITTED, NO_QUEUES, JobAsk, waiting_reasons
from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec, GpuRequestSpec, validate_spec

WHOLE = GpuRequestSpec(count=1)


def spec(with_queues: bool = True) -> GpuplexSpec:
    """Four H100s: contoso (a guarantee of 2 GPUs, one held by its replica), adatum (no
    guarantee: it borrows), fabrikam (a replica, and no queue at all)."""
    dedicated = {"isolation": "dedicated"}
    data: dict[str, object] = {
        "fleet": {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 4}]}]},
        "tenants": [
            {**dedicated, "name": "contoso", "workloads": [{"name": "a", "gpu": {"count": 1}}]},
            {**dedicated, "name": "adatum"},
            {**dedicated, "name": "fabrikam", "workloads": [{"name": "b", "gpu": {"count": 1}}]},
        ],
    }
    if with_queues:
        data["queues"] = {
            "preemption": {"min_runtime_s": 0},
            "organisations": [
                {
                    "name": "acme",
                    "guarantee": {"gpus": 2},
                    "teams": [
                        {
                            "name": "research",
                            "guarantee": {"gpus": 2},
                            "tenants": [
                                {"name": "contoso", "guarantee": {"gpus": 2}},
                                {"name": "adatum"},
                            ],
                        }
                    ],
                }
            ],
        }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


def test_a_job_that_fits_is_admitted_and_the_next_one_waits_with_the_rules_reason() -> None:
    applied = spec()
    queued = [
        JobAsk("one", "adatum", GpuRequestSpec(count=2), 0, 1.0),
        JobAsk("two", "adatum", WHOLE, 0, 2.0),
    ]
    reasons = waiting_reasons(applied, make_plan(applied), queued, [], now_s=10.0)
    assert reasons["one"] == ADMITTED
    assert reasons["two"] == "the cluster is short of 1 gpus for it"  # adatum borrows: holds none


def test_a_job_inside_its_guarantee_reclaims_borrowed_work_beside_a_tenant_without_a_queue() -> (
    None
):
    applied = spec()
    running = [JobAsk("borrowed", "adatum", GpuRequestSpec(count=2), 0, 0.0)]
    queued = [JobAsk("mine", "contoso", WHOLE, 0, 5.0)]
    reasons = waiting_reasons(applied, make_plan(applied), queued, running, now_s=10.0)
    assert reasons == {"mine": "preempting borrowed for it; it starts when they stop"}


def test_without_queues_every_job_waits_for_them() -> None:
    applied = spec(with_queues=False)
    queued = [JobAsk("one", "adatum", WHOLE, 0, 1.0)]
    assert waiting_reasons(applied, make_plan(applied), queued, [], 0.0) == {"one": NO_QUEUES}


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
        (JobState.RUNNING, JobState.QUEUED, False),
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
