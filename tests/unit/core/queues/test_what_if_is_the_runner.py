"""`gpuplex queues` explains a wait exactly as the job runner decides it: on random queue trees
and job streams, the state the runner's lifecycle steps reach (jobs running, some preempted and
still stopping, some queued, usage in the past) is written as a what-if file, and for every
pending job the what-if's answer (it starts, it preempts these, it waits for this reason) is the
runner's next step for it, where the runner made no backfill reservation (a reservation is
about nodes and the running jobs' max runtimes, which a what-if file does not have)."""

from __future__ import annotations

from dataclasses import replace
from itertools import count
from typing import Any

from hypothesis import assume, given, settings, strategies as st

from gpuplex.core.jobs.lifecycle import JobRecord, LifecycleStep, step
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan import make_plan
from gpuplex.core.queues.tree import queue_tree
from gpuplex.core.queues.usage import UsageInterval, decayed_usage
from gpuplex.core.queues.what_if import WhatIf, evaluate, parse_what_if
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.quota_kinds import GPUS

MEMORY_GIB = 80  # an H100-80GB's


@st.composite
def queue_trees(draw: st.DrawFn, gpus: int) -> dict[str, Any]:
    """A `queues:` section: one or two organisations of one or two teams of one to three
    tenants, guarantees inside their parents', some limits, weights, lenders and borrowers."""
    names = (f"q{i}" for i in count())

    def queue(budget: int) -> dict[str, Any]:
        guarantee = draw(st.integers(0, budget))
        entry: dict[str, Any] = {"name": next(names), "weight": draw(st.integers(1, 3))}
        if guarantee:
            entry["guarantee"] = {"gpus": guarantee}
        if draw(st.integers(0, 3)) == 0:
            entry["limit"] = {"gpus": guarantee + draw(st.integers(1, gpus))}
        return entry

    organisations = []
    left = gpus
    for _ in range(draw(st.integers(1, 2))):
        org = queue(left)
        left -= org.get("guarantee", {}).get("gpus", 0)
        org_left = org.get("guarantee", {}).get("gpus", gpus)
        org["teams"] = []
        for _ in range(draw(st.integers(1, 2))):
            team = queue(org_left)
            org_left -= team.get("guarantee", {}).get("gpus", 0) if "guarantee" in org else 0
            team_left = team.get("guarantee", {}).get("gpus", org_left)
            team["tenants"] = []
            for _ in range(draw(st.integers(1, 3))):
                tenant = queue(team_left)
                if "guarantee" in team:
                    team_left -= tenant.get("guarantee", {}).get("gpus", 0)
                tenant["lend"] = draw(st.integers(0, 3)) > 0
                tenant["borrow"] = "guarantee" not in tenant or draw(st.integers(0, 3)) > 0
                tenant["preemption"] = {
                    "within_queue": draw(st.sampled_from(["never", "lower_priority"]))
                }
                team["tenants"].append(tenant)
            org["teams"].append(team)
        organisations.append(org)
    return {
        "preemption": {"min_runtime_s": draw(st.sampled_from([0, 100]))},
        "fair_sharing": {"half_life_s": draw(st.sampled_from([0, 600, 3600]))},
        "organisations": organisations,
    }


def tenants_of(queues: dict[str, Any]) -> list[str]:
    return [
        t["name"] for org in queues["organisations"] for m in org["teams"] for t in m["tenants"]
    ]


def spec_of(gpus: int, queues: dict[str, Any]) -> GpuplexSpec:
    data = {
        "fleet": {
            "nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": gpus, "mig": "off"}]}]
        },
        "tenants": [{"name": name, "isolation": "dedicated"} for name in tenants_of(queues)],
        "queues": queues,
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


class Runner:
    """The store's jobs, moved by the lifecycle's steps as the job runner moves them; every
    job that starts reports its process alive (none ends in these few steps)."""

    def __init__(self, spec: GpuplexSpec) -> None:
        self.spec = spec
        self.plan = make_plan(spec)
        tree = queue_tree(spec)
        assert tree is not None
        self.tree = tree
        self.jobs: dict[str, JobRecord] = {}

    def submit(self, job_id: str, tenant: str, gpus: int, priority: int, at_s: float) -> None:
        job = JobSpec(tenant=tenant, gpu={"count": gpus}, command=["train"], priority=priority)  # type: ignore[arg-type]
        self.jobs[job_id] = JobRecord(job_id, job, JobState.QUEUED, submitted_s=at_s)

    def step(self, now_s: float, usage: dict[str, dict[str, float]] | None = None) -> LifecycleStep:
        return step(self.spec, self.plan, self.tree, list(self.jobs.values()), now_s, usage=usage)

    def apply(self, result: LifecycleStep, now_s: float) -> None:
        for change in result.transitions:
            record = self.jobs[change.job_id]
            if change.state is JobState.STARTING:  # placed; its host reports it alive
                record = replace(
                    record,
                    state=JobState.RUNNING,
                    placement=change.placement,
                    started_s=now_s,
                    alive=True,
                )
            elif change.state is JobState.PREEMPTING:  # still stopping when the what-if asks
                record = replace(record, state=change.state, preempted_for=change.preempted_for)
            self.jobs[change.job_id] = record


@st.composite
def runner_states(draw: st.DrawFn) -> tuple[Runner, float, list[UsageInterval]]:
    gpus = draw(st.integers(2, 8))
    queues = draw(queue_trees(gpus))
    runner = Runner(spec_of(gpus, queues))
    tenants = tenants_of(queues)
    ids = (f"j{i}" for i in count())
    now = 1000.0
    for _ in range(draw(st.integers(1, 3))):  # a few passes, jobs submitted before each
        for _ in range(draw(st.integers(0, 6))):
            runner.submit(
                next(ids),
                draw(st.sampled_from(tenants)),
                draw(st.integers(1, min(3, gpus))),
                draw(st.integers(0, 2)),
                now - draw(st.integers(1, 500)),
            )
        runner.apply(runner.step(now), now)
        now += draw(st.integers(1, 400))
    for _ in range(draw(st.integers(1, 6))):  # and the jobs the what-if asks about
        runner.submit(
            next(ids),
            draw(st.sampled_from(tenants)),
            draw(st.integers(1, min(3, gpus))),
            draw(st.integers(0, 2)),
            now - draw(st.integers(0, 500)),
        )
    past = [
        UsageInterval(
            draw(st.sampled_from(tenants)),
            {GPUS: float(draw(st.integers(1, gpus)))},
            now - (start := draw(st.integers(100, 20_000))),
            now - draw(st.integers(0, start)),
        )
        for _ in range(draw(st.integers(0, 3)))
    ]
    return runner, now, past


def as_what_if(runner: Runner, now: float, past: list[UsageInterval]) -> dict[str, Any]:
    """The runner's state written as a `gpuplex queues` file."""
    queues = runner.spec.queues.model_dump(mode="json", exclude_none=True)
    gpus = int(runner.tree.capacity[GPUS])
    running, pending = [], []
    for record in runner.jobs.values():
        count_ = record.job.gpu.count
        if record.state is JobState.QUEUED:
            pending.append(
                {
                    "name": record.id,
                    "tenant": record.job.tenant,
                    "asks": {"gpus": count_},
                    "priority": record.job.priority,
                    "waiting_s": now - record.submitted_s,
                }
            )
            continue
        assert record.started_s is not None
        entry = {
            "name": record.id,
            "tenant": record.job.tenant,
            "holds": {"gpus": count_},
            "priority": record.job.priority,
            "running_s": now - record.started_s,
        }
        if record.state is JobState.PREEMPTING:
            entry["stopping_for"] = record.preempted_for
        running.append(entry)
    return {
        "capacity": {
            "gpus": gpus,
            "gpu_memory_gib": float(gpus * MEMORY_GIB),
            "compute_percent": gpus * 100,
        },
        "queues": queues,
        "running": running,
        "pending": pending,
        "past": [
            {
                "tenant": u.tenant,
                "held": {"gpus": int(u.resources[GPUS])},
                "from_s_ago": now - u.start_s,
                "until_s_ago": now - (u.end_s if u.end_s is not None else now),
            }
            for u in past
        ],
    }


@settings(max_examples=200, deadline=None)
@given(state=runner_states())
def test_the_what_if_answers_each_pending_job_as_the_runner_decides_it(
    state: tuple[Runner, float, list[UsageInterval]],
) -> None:
    runner, now, past = state
    holding = [j for j in runner.jobs.values() if j.state is not JobState.QUEUED]
    running = [
        UsageInterval(j.job.tenant, {GPUS: float(j.job.gpu.count or 0)}, j.started_s or 0.0)
        for j in holding
    ]
    usage = decayed_usage(running + past, now, runner.tree.half_life_s)
    decided = runner.step(now, usage=usage)
    # a backfill reservation needs the nodes (core.jobs.backfill), and the what-if counts amounts
    assume(decided.reservation is None)
    started = {t.job_id for t in decided.transitions if t.state is JobState.STARTING}
    evicted: dict[str, set[str]] = {}
    for change in decided.transitions:
        if change.state is JobState.PREEMPTING:
            assert change.preempted_for is not None
            evicted.setdefault(change.preempted_for, set()).add(change.job_id)

    parsed = parse_what_if(as_what_if(runner, now, past))
    assert isinstance(parsed, WhatIf), parsed
    answers = evaluate(parsed).pending
    assert {a.job.id for a in answers} == {
        j.id for j in runner.jobs.values() if j.state is JobState.QUEUED
    }
    for answer in answers:
        job_id = answer.job.id
        assert answer.starts == (job_id in started), (job_id, answer, decided.waiting.get(job_id))
        assert {name for name, _ in answer.victims} == evicted.get(job_id, set())
        if not answer.starts:
            assert answer.reason == decided.waiting[job_id]
