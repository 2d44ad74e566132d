"""The lifecycle step against the state machine, over random job streams and random host reports
(processes that start, exit 0 or not, die, vanish; cancellations; the clock): every state change
the step makes is one the store accepts (`states.may_move`), and no GPU ever holds two whole-GPU
jobs at once, counting those still stopping."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from gpuplex.core.jobs.states import HOLDING_STATES, JobState, may_move
from tests.unit.core.jobs.test_lifecycle import World

TENANTS = ("contoso", "fabrikam")

actions = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(TENANTS), st.integers(-2, 2)),
        st.tuples(st.just("alive"), st.integers(0, 7), st.booleans()),
        st.tuples(st.just("exit"), st.integers(0, 7), st.sampled_from([0, 1, 137])),
        st.tuples(st.just("cancel"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("wait"), st.just(""), st.integers(1, 600)),
        st.tuples(st.just("step"), st.just(""), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(actions)
def test_every_change_is_allowed_and_no_gpu_is_held_twice(
    script: list[tuple[str, object, int]],
) -> None:
    world = World()
    submitted: list[str] = []
    for kind, who, number in script:
        if kind == "submit":
            job_id = f"j{len(submitted)}"
            world.submit(job_id, str(who), priority=number)
            submitted.append(job_id)
        elif kind in ("alive", "exit", "cancel") and submitted:
            job_id = submitted[int(str(who)) % len(submitted)]
            record = world.jobs[job_id]
            if kind == "alive" and record.state in HOLDING_STATES:
                world.report(job_id, alive=bool(number))
            elif kind == "exit" and record.state in HOLDING_STATES:
                world.report(job_id, alive=False, exit_code=number)
            elif kind == "cancel":
                world.jobs[job_id] = replace(record, cancel_requested=True)
        elif kind == "wait":
            world.now += number
        elif kind == "step":
            before = {j: r.state for j, r in world.jobs.items()}
            result = world.step()
            for change in result.transitions:
                assert may_move(before[change.job_id], change.state), (
                    f"{change.job_id}: {before[change.job_id]} -> {change.state}"
                )
            held = Counter(
                (r.placement.node, index)
                for r in world.jobs.values()
                if r.state in HOLDING_STATES and r.placement is not None
                for index in r.placement.gpu_indices
            )
            assert all(count == 1 for count in held.values()), held
    assert all(r.state in JobState for r in world.jobs.values())
