"""Backfill with a reservation through `gpuplex up` on simulated GPUs, the way users run one
server: as `test_backfill_live.py` (a control plane and a host runtime of their own), with the
job runner and the host runtime that `up` starts and their own intervals.

Four 1-GPU jobs run with a max runtime; an 8-GPU job gets a reservation from when their max
runtimes are up, brief 1-GPU jobs backfill on the free GPUs meanwhile, a job without a max
runtime waits, and the 8-GPU job starts on time."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.abuse.host.uprun import UpRun, free_port, small_spec, up_base
from tests.e2e.jobs.stack import eventually, sleeper_job
from tests.jobs_http import show_job, submit_job

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

__all__ = ["up_base"]

GRACE_S = 2
#: the running jobs' max runtime: long enough to submit everything while they run
HOLD_S = 15
#: a backfilled job's max runtime: it ends well before the reservation starts
BRIEF_S = 3
#: `up`'s runner and host passes (2 s each), a process start and a stop on a loaded machine: a
#: bound on correctness, not a speed target
SLACK_S = 15
ADMIN_LINE = re.compile(r"^\s*admin token\s+(?P<token>\S+)\s*$")


def spec(gateway_port: int, model_port: int) -> dict[str, Any]:
    """Nine GPUs: one for a tenant's model server (`up`'s banner waits for it), eight for jobs."""
    base = small_spec(gateway_port, model_port)
    base["fleet"]["nodes"][0]["gpus"][0]["count"] = 9
    base["tenants"].append({"name": "lab", "isolation": "dedicated", "workloads": []})
    return {
        **base,
        "queues": {
            "preemption": {"min_runtime_s": 0, "grace_s": GRACE_S},
            "organisations": [
                {
                    "name": "org",
                    "teams": [
                        {"name": "all", "tenants": [{"name": "lab", "guarantee": {"gpus": 8}}]}
                    ],
                }
            ],
        },
    }


@pytest.fixture
def up(up_base: Path) -> Iterator[UpRun]:
    run = UpRun(up_base, spec(free_port(), free_port()))
    try:
        yield run
    finally:
        run.kill()
        if (run.state_dir / "host").exists():  # the tenants: `host down` stops them all
            down = [sys.executable, "-m", "gpuplex.cli", "host", "down", "--forget-users"]
            subprocess.run(  # noqa: S603 - our own CLI
                [*down, "--state-dir", str(run.state_dir / "host")],
                capture_output=True,
                timeout=120,
                check=False,
            )


def test_through_up_an_8_gpu_job_is_reserved_and_starts_on_time_while_1_gpu_jobs_backfill(
    up: UpRun,
) -> None:
    up.start()
    up.wait_for_banner(180)
    found = [m["token"] for line in up.lines if (m := ADMIN_LINE.match(line))]
    assert found, up.output()
    token = found[-1]

    def api(method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = f"http://127.0.0.1:{up.port}/api/v1{path}"
        headers = {"authorization": f"Bearer {token}"}
        return httpx.request(method, url, headers=headers, timeout=30, **kwargs)

    def show(job_id: str) -> dict[str, Any]:
        return show_job(api, "lab", job_id)

    def explain() -> str:
        lines = []
        for job_id in ids:
            shown = show(job_id)
            steps = " -> ".join(e["state"] for e in shown["events"])
            lines.append(f"{job_id}: {steps}; {shown['reason']}; {shown['waiting_reason']}")
        return "\n".join(lines) + "\n" + up.output()[-3000:]

    def started_at(job_id: str) -> float:
        at = next(e["at"] for e in show(job_id)["events"] if e["state"] == "starting")
        return datetime.fromisoformat(at).timestamp()

    holders = [submit_job(api, "lab", sleeper_job(1, 600, max_runtime_s=HOLD_S)) for _ in range(4)]
    ids = list(holders)
    eventually(
        lambda: all(show(j)["state"] == "running" for j in holders),
        "four 1-GPU jobs running",
        60,
        explain,
    )
    big = submit_job(api, "lab", sleeper_job(8, 1, name="big"))
    brief = [submit_job(api, "lab", sleeper_job(1, 1, max_runtime_s=BRIEF_S)) for _ in range(2)]
    endless = submit_job(api, "lab", sleeper_job(1, 1, name="endless"))  # no max runtime
    ids += [big, *brief, endless]
    shown = eventually(
        lambda: "reserved 8 GPUs on box from about" in (show(big)["waiting_reason"] or ""),
        "the 8-GPU job's reservation",
        30,
        explain,
    )
    assert shown
    eventually(
        lambda: all(show(j)["state"] in ("running", "succeeded", "timed_out") for j in brief),
        "the brief jobs backfilled",
        30,
        explain,
    )
    assert show(endless)["state"] == "queued", explain()
    assert show(big)["state"] == "queued", explain()

    promised = max(started_at(j) for j in holders) + HOLD_S + GRACE_S
    eventually(
        lambda: show(big)["state"] in ("starting", "running", "succeeded"),
        "the 8-GPU job started",
        HOLD_S + GRACE_S + SLACK_S + 30,
        explain,
    )
    big_started = started_at(big)
    sys.stdout.write(f"the 8-GPU job started {big_started - promised:+.1f} s from the promise\n")
    assert big_started <= promised + SLACK_S
    eventually(
        lambda: show(endless)["state"] in ("running", "succeeded"),
        "the job without a max runtime started after it",
        60,
        explain,
    )
    assert started_at(endless) >= big_started
