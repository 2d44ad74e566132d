"""Backfill with a reservation, live on one 8-GPU server (`gpuplex server` and `gpuplex host run
--follow-store` on simulated GPUs, as separate processes):

four 1-GPU jobs run with a max runtime; an 8-GPU job cannot start until they end, so it gets a
reservation from when their max runtimes are up, and `gpuplex job show` says so in plain words.
Meanwhile 1-GPU jobs sure to be gone by then start at once on the free GPUs (backfill), and a
1-GPU job with no max runtime, which could hold a GPU past that time, waits. The 8-GPU job starts
on time: once the running jobs are stopped at their max runtime, within their grace period and
a few passes of the runner and the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.e2e.jobs.stack import JobsStack, eventually, jobs_stack, sleeper_job

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

GRACE_S = 2
#: the running jobs' max runtime: long enough to submit everything while they run
HOLD_S = 20
#: a backfilled job's max runtime: it ends well before the reservation starts
BRIEF_S = 4
#: the runner's and host's passes, a process start and a stop on a loaded machine: a bound on
#: correctness, not a speed target
SLACK_S = 15
#: sleeps (past its max runtime unless told less); on SIGTERM it exits 143
SPEC: dict[str, Any] = {
    "version": 1,
    "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 8}]}]},
    "tenants": [{"name": "lab", "isolation": "dedicated", "workloads": []}],
    "queues": {
        "preemption": {"min_runtime_s": 0, "grace_s": GRACE_S},
        "organisations": [
            {
                "name": "org",
                "teams": [{"name": "all", "tenants": [{"name": "lab", "guarantee": {"gpus": 8}}]}],
            }
        ],
    },
}


@pytest.fixture
def stack() -> Iterator[JobsStack]:
    with jobs_stack(SPEC) as running:
        yield running


def test_an_8_gpu_job_is_reserved_and_starts_on_time_while_1_gpu_jobs_backfill(
    stack: JobsStack,
) -> None:
    stack.start()
    jobs: dict[str, str] = {}
    holders = [stack.submit("lab", sleeper_job(1, 600, max_runtime_s=HOLD_S)) for _ in range(4)]
    jobs.update(dict.fromkeys(holders, "lab"))

    def all_running(ids: list[str]) -> bool:
        return all(stack.show("lab", j)["state"] == "running" for j in ids)

    eventually(lambda: all_running(holders), "four 1-GPU jobs running", 60, explain(stack, jobs))
    big = stack.submit("lab", sleeper_job(8, 2, name="big"))
    jobs[big] = "lab"
    brief = [stack.submit("lab", sleeper_job(1, 1, max_runtime_s=BRIEF_S)) for _ in range(2)]
    endless = stack.submit("lab", sleeper_job(1, 1, name="endless"))  # no max runtime
    jobs.update(dict.fromkeys([*brief, endless], "lab"))

    shown = eventually(
        lambda: _reserved(stack, big), "the 8-GPU job's reservation", 30, explain(stack, jobs)
    )
    sys.stdout.write(f"gpuplex job show {big}: waits: {shown}\n")
    # the backfilled jobs start at once on free GPUs; the one without a max runtime waits
    eventually(
        lambda: all(
            stack.show("lab", j)["state"] in ("running", "succeeded", "timed_out") for j in brief
        ),
        "the brief jobs backfilled",
        30,
        explain(stack, jobs),
    )
    assert stack.show("lab", endless)["state"] == "queued"
    assert stack.show("lab", big)["state"] == "queued"

    started_at = [_started_at(stack, j) for j in holders]
    promised = max(started_at) + HOLD_S + GRACE_S
    eventually(
        lambda: stack.show("lab", big)["state"] in ("starting", "running", "succeeded"),
        "the 8-GPU job started",
        HOLD_S + GRACE_S + SLACK_S + 30,
        explain(stack, jobs),
    )
    big_started = _started_at(stack, big)
    sys.stdout.write(
        f"the 8-GPU job started {big_started - promised:+.1f} s from the time promised\n"
    )
    assert big_started <= promised + SLACK_S
    # the job without a max runtime started only after the 8-GPU job ran
    eventually(
        lambda: stack.show("lab", endless)["state"] in ("running", "succeeded"),
        "the job without a max runtime started after it",
        60,
        explain(stack, jobs),
    )
    assert _started_at(stack, endless) >= big_started


def _reserved(stack: JobsStack, job_id: str) -> str | None:
    """Why `gpuplex job show` says the job waits, once that is its reservation."""
    env = {**os.environ, "GPUPLEX_SERVER_URL": f"http://127.0.0.1:{stack.port}"}
    env["GPUPLEX_TOKEN"] = stack.token
    argv = [sys.executable, "-m", "gpuplex.cli", "job", "show", job_id, "--tenant", "lab"]
    done = subprocess.run(  # noqa: S603 - our own CLI
        [*argv, "--output", "json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    reason: str = json.loads(done.stdout).get("waiting_reason") or ""
    return reason if "reserved 8 GPUs on box from about" in reason else None


def _started_at(stack: JobsStack, job_id: str) -> float:
    """When the job was placed (its `starting` event), in seconds since the epoch."""
    events = stack.show("lab", job_id)["events"]
    at = next(e["at"] for e in events if e["state"] == "starting")
    return datetime.fromisoformat(at).timestamp()


def explain(stack: JobsStack, jobs: dict[str, str]) -> Any:
    return lambda: stack.explain(jobs)
