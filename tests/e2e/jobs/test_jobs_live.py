"""Jobs, live, end to end on simulated GPUs: `gpuplex server` runs the jobs, `gpuplex host run
--follow-store` runs their processes as the tenants' users.

Two tenants flood a 4-GPU box with jobs that borrow it all; a third, with a guarantee of two GPUs,
submits one. The control plane preempts one borrowed job (SIGTERM: the job checkpoints and exits),
the guaranteed job starts within the grace period plus start-up, and the preempted job goes back
to the queue and later completes. Meanwhile the control plane, then the host runtime, are killed
with -9 and started again: no job is lost, none runs twice. The statements bill every job's GPU
time."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.jobs.stack import JobsStack, eventually, jobs_stack

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

GRACE_S = 3
#: a flood job runs long enough that no GPU frees on its own before the guarantee is claimed
FLOOD_S = 30
GUARD_S = 3
#: generous: the runner's and the host's passes, a process start, and a control plane restarted
#: in between (a bound on correctness, not a speed target: those are in bench/jobs.py)
START_S = 30
#: sleeps, then exits 0; on SIGTERM it "checkpoints" (says so) and exits 143
JOB_COMMAND = [
    "sh",
    "-c",
    "echo started; trap 'echo checkpoint; exit 143' TERM; sleep {s} & wait $!; echo done",
]


def job(seconds: float, **fields: Any) -> dict[str, Any]:
    command = [*JOB_COMMAND[:2], JOB_COMMAND[2].format(s=seconds)]
    return {"gpu": {"count": 1}, "command": command, **fields}


def tenant(name: str) -> dict[str, Any]:
    return {"name": name, "isolation": "dedicated", "workloads": []}


SPEC: dict[str, Any] = {
    "version": 1,
    "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 4}]}]},
    "tenants": [tenant("flood-a"), tenant("flood-b"), tenant("guard")],
    "pricing": {"currency": "USD", "gpu_hour": {"H100-80GB": "3.60"}},
    "queues": {
        "preemption": {"reclaim": True, "min_runtime_s": 0, "grace_s": GRACE_S},
        "organisations": [
            {
                "name": "lab",
                "teams": [
                    {
                        "name": "all",
                        "tenants": [
                            {"name": "flood-a"},
                            {"name": "flood-b"},
                            {"name": "guard", "guarantee": {"gpus": 2}},
                        ],
                    }
                ],
            }
        ],
    },
}


@pytest.fixture
def stack() -> Iterator[JobsStack]:
    with jobs_stack(SPEC) as running:
        yield running


def states(stack: JobsStack, jobs: dict[str, str]) -> dict[str, str]:
    return {job_id: stack.show(t, job_id)["state"] for job_id, t in jobs.items()}


def test_a_guarantee_reclaims_a_borrowed_gpu_and_nothing_is_lost(stack: JobsStack) -> None:
    began = datetime.now(UTC)
    stack.start()
    jobs: dict[str, str] = {}  # job id -> tenant
    for n in range(3):
        for flooder in ("flood-a", "flood-b"):
            jobs[stack.submit(flooder, job(FLOOD_S, name=f"{flooder}-{n}"))] = flooder

    def four_running() -> dict[str, str] | None:
        now = states(stack, jobs)
        return now if list(now.values()).count("running") == 4 else None

    first = eventually(
        four_running, "four flood jobs running on the four GPUs", 90, lambda: stack.explain(jobs)
    )
    waiting = [j for j, s in first.items() if s == "queued"]
    assert len(waiting) == 2
    for job_id in waiting:  # `job show` explains each wait in plain words
        reason = stack.show(jobs[job_id], job_id)["waiting_reason"]
        assert reason, f"queued job {job_id} has no reason"
        sys.stdout.write(f"{job_id} waits: {reason}\n")

    submitted = time.monotonic()
    guarded = stack.submit("guard", job(GUARD_S, name="guarded"))
    jobs[guarded] = "guard"

    # the control plane dies around the preemption (a victim may stop within a pass), and comes back
    def one_preempted() -> bool:
        return any(
            shown["state"] == "preempting" or shown["attempts"] > 0
            for shown in (stack.show(t, j) for j, t in jobs.items() if t != "guard")
        )

    eventually(one_preempted, "a borrowed job preempted", 30, lambda: stack.explain(jobs))
    stack.kill_server()
    stack.start_server()
    eventually(  # a short job may be done before a pass of the runner sees it running
        lambda: stack.show("guard", guarded)["state"] in ("running", "succeeded"),
        "the guaranteed job running",
        60,
        lambda: stack.explain(jobs),
    )
    took = time.monotonic() - submitted
    assert took < GRACE_S + START_S
    # the host runtime dies too, and comes back: it re-adopts the running jobs, restarts none
    stack.kill_host()
    stack.start_host()
    eventually(
        lambda: [e for e in stack.host_events() if e["kind"] == "adopted"],
        "the restarted host re-adopting the running jobs",
        30,
    )
    sys.stdout.write(
        f"the guaranteed job ran {took:.1f} s after it was submitted (grace {GRACE_S} s)\n"
    )

    finished = {"succeeded", "failed", "cancelled", "timed_out"}

    def all_finished() -> dict[str, str] | None:
        now = states(stack, jobs)
        return now if set(now.values()) <= finished else None

    final = eventually(all_finished, "every job finished", 180, lambda: stack.explain(jobs))
    assert set(final.values()) == {"succeeded"}, final
    shown = {job_id: stack.show(t, job_id) for job_id, t in jobs.items()}
    preempted = [j for j, s in shown.items() if s["attempts"] > 0]
    assert len(preempted) == 1, {j: s["attempts"] for j, s in shown.items()}
    (victim,) = preempted
    assert jobs[victim] in ("flood-a", "flood-b")
    victim_states = [e["state"] for e in shown[victim]["events"]]
    assert victim_states[:6] == [
        "queued",
        "starting",
        "running",
        "preempting",
        "queued",
        "starting",
    ]
    assert victim_states[-1] == "succeeded"

    # one process per attempt, never two at once: the host started each job once per attempt
    started: dict[str, int] = {}
    for event in stack.host_events():
        if event["kind"] == "started" and "/job-" in event["target"]:
            job_id = event["target"].split("/job-")[1].split("#")[0]
            started[job_id] = started.get(job_id, 0) + 1
    assert started == {j: s["attempts"] + 1 for j, s in shown.items()}

    # statements bill every job's GPU time: each run, from its placement until it left its GPU
    rolled = stack.api(
        "POST",
        "/meter/rollup",
        json={"start": began.isoformat(), "end": datetime.now(UTC).isoformat()},
    )
    assert rolled.status_code == 200, rolled.text
    month = began.strftime("%Y-%m")
    for name in ("flood-a", "flood-b", "guard"):
        reply = stack.api("GET", f"/tenants/{name}/statements/{month}")
        assert reply.status_code == 200, reply.text
        billed = {j["job_id"]: Decimal(j["gpu_seconds"]) for j in reply.json()["jobs"]}
        mine = {j for j, t in jobs.items() if t == name}
        assert set(billed) == mine, (name, billed)
        for job_id in mine:  # at least the time its process ran
            assert billed[job_id] >= (GUARD_S if name == "guard" else FLOOD_S), job_id
        gpu_hours = sum(billed.values(), Decimal(0)) / 3600
        # priced as any replica's GPU time: $3.60 a GPU-hour (a statement rounds to the cent)
        assert abs(Decimal(reply.json()["total"]) - gpu_hours * Decimal("3.60")) <= Decimal("0.01")

    # the preempted job was asked to checkpoint (SIGTERM) and said so in its log
    logs = stack.api("GET", f"/tenants/{jobs[victim]}/jobs/{victim}/logs").json()
    texts = [line["text"] for line in logs["lines"]]
    assert "checkpoint" in texts, texts
    assert texts.count("started") == 2, texts
