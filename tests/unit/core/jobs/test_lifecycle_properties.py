"""The lifecycle step against the state machine, over random job streams and random host reports
(processes that start, exit 0 or not, are stopped by gpuplex, are lost, vanish; retries;
cancellations; hosts not heard from since the runner started; the clock):

- every state change the step makes is one the store accepts (`states.may_move`), in the order
  the runner writes them (a job may be requeued and placed again in one step);
- no GPU ever holds two whole-GPU jobs at once, counting those still stopping;
- no attempt runs twice: a job whose host reported its process ended is never left starting or
  running under that attempt; every start after a requeue is a new attempt, and the attempt that
  ends carries the exit code its host reported;
- retries: only a failure of the job's own counts, never more than its backoff_limit, and a retry
  never starts before its time;
- nothing is decided on a node whose host has not reported since the runner started, and while
  a job holds capacity there nothing is admitted or preempted anywhere."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given, settings, strategies as st

from gpuplex.core.jobs.states import FINISHED_STATES, HOLDING_STATES, JobState, ProcessEnd, may_move
from tests.unit.core.jobs.test_lifecycle import World, applied

TENANTS = ("contoso", "fabrikam")
ENDS = [ProcessEnd.EXITED, ProcessEnd.STOPPED, ProcessEnd.LOST, None]

actions = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(TENANTS), st.integers(-2, 2)),
        st.tuples(st.just("alive"), st.integers(0, 7), st.booleans()),
        st.tuples(
            st.just("exit"), st.integers(0, 7), st.sampled_from([0, 1, 137]), st.sampled_from(ENDS)
        ),
        st.tuples(st.just("cancel"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("wait"), st.just(""), st.integers(1, 600)),
        st.tuples(st.just("step"), st.just(""), st.just(0)),
        st.tuples(st.just("unheard"), st.just(""), st.just(0)),
    ),
    max_size=50,
)


@settings(max_examples=400, deadline=None)
@given(actions, st.integers(0, 2))
def test_every_change_is_allowed_and_no_gpu_is_held_twice_and_no_attempt_runs_twice(
    script: list[tuple[object, ...]], backoff_limit: int
) -> None:
    world = World()
    submitted: list[str] = []
    for kind, who, number, *rest in script:
        if kind == "submit":
            job_id = f"j{len(submitted)}"
            world.submit(
                job_id,
                str(who),
                priority=int(str(number)),
                backoff_limit=backoff_limit,
                backoff_initial_s=5,
            )
            submitted.append(job_id)
        elif kind in ("alive", "exit", "cancel") and submitted:
            job_id = submitted[int(str(who)) % len(submitted)]
            record = world.jobs[job_id]
            if kind == "alive" and record.state in HOLDING_STATES:
                world.report(job_id, alive=bool(number))
            elif kind == "exit" and record.state in HOLDING_STATES:
                end = rest[0] if isinstance(rest[0], ProcessEnd) else None
                code = None if end is ProcessEnd.LOST else int(str(number))
                world.report(job_id, alive=False, exit_code=code, end=end, ended_s=world.now)
            elif kind == "cancel":
                world.jobs[job_id] = replace(record, cancel_requested=True)
        elif kind == "wait":
            world.now += int(str(number))
        elif kind in ("step", "unheard"):
            check_one_step(world, frozenset({"n0"}) if kind == "unheard" else frozenset())
    assert all(r.state in JobState for r in world.jobs.values())


def check_one_step(world: World, unheard: frozenset[str]) -> None:
    before = dict(world.jobs)
    now = world.now
    result = world.step(unheard)
    seen = dict(before)
    for change in result.transitions:
        old = seen[change.job_id]
        assert may_move(old.state, change.state), f"{change.job_id}: {old.state} -> {change.state}"
        if change.state is JobState.QUEUED and old.state is not JobState.QUEUED:
            # only the job's own failure uses a retry: never a preemption, a stop by gpuplex or
            # a lost process
            own = old.end not in (ProcessEnd.STOPPED, ProcessEnd.LOST) and (
                old.state in (JobState.STARTING, JobState.RUNNING) or old.end is ProcessEnd.EXITED
            )
            assert change.counts_failure == own, (old, change)
        if change.state is JobState.STARTING:
            assert old.state is JobState.QUEUED
            assert old.not_before_s is None or old.not_before_s <= now  # never before its time
        ended_attempt = old.state in HOLDING_STATES and change.state not in HOLDING_STATES
        if ended_attempt and old.exit_code is not None:
            assert change.exit_code == old.exit_code
        seen[change.job_id] = applied(old, change, now)
    holding_there = any(r.state in HOLDING_STATES for r in before.values())
    if unheard and holding_there:  # what they hold may be free: nothing admitted or preempted
        assert all(
            t.state not in (JobState.STARTING, JobState.PREEMPTING) for t in result.transitions
        )
    if unheard:  # nothing decided on the node's jobs by what its host reported
        moved_by_reports = [
            t
            for t in result.transitions
            if before[t.job_id].state in HOLDING_STATES
            and t.state is not JobState.STOPPING  # a cancellation or the clock, not a report
        ]
        assert moved_by_reports == []
    for job_id, record in world.jobs.items():
        if job_id not in before or unheard:
            continue
        old = before[job_id]
        gone = old.exit_code is not None or old.alive is False
        if old.state in (JobState.STARTING, JobState.RUNNING) and gone:
            # its process ended: never left to run on under the same attempt
            assert record.state not in (JobState.STARTING, JobState.RUNNING) or (
                record.attempt > old.attempt
            ), f"{job_id}: {old.state} -> {record.state} at attempt {record.attempt}"
        assert record.failures <= record.job.backoff_limit
        assert record.attempt >= old.attempt
        if record.state in FINISHED_STATES or record.state is JobState.QUEUED:
            assert record.placement is None or record.state in FINISHED_STATES
    held = Counter(
        (r.placement.node, index)
        for r in world.jobs.values()
        if r.state in HOLDING_STATES and r.placement is not None
        for index in r.placement.gpu_indices
    )
    assert all(count == 1 for count in held.values()), held
