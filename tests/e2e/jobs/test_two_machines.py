"""Control plane and host runtime as if on two machines: `gpuplex server` with a home of its own
and `gpuplex host run --follow-store` with its state folder, sharing only the store (a SQLite file
in a third folder). A job writes to stdout and stderr and ends; `gpuplex job logs` shows both, and
`GET /events` the host's events, all as the host reported them to the store: the control plane
has no path to the host's files (its home holds none of them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.jobs.stack import JobsStack, eventually, jobs_stack

pytestmark = pytest.mark.stacks

ROOT = Path(__file__).resolve().parents[3]
TENANT = "acme"
#: a line to each stream, then a last one after a pause (the tail is read again when it ends)
COMMAND = ["sh", "-c", "echo to-stdout; echo to-stderr >&2; sleep 1; echo last-words"]

SPEC: dict[str, Any] = {
    "version": 1,
    "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 1}]}]},
    "tenants": [{"name": TENANT, "isolation": "dedicated", "workloads": []}],
    "queues": {
        "organisations": [
            {"name": "lab", "teams": [{"name": "all", "tenants": [{"name": TENANT}]}]}
        ],
    },
}


@pytest.fixture
def stack() -> Iterator[JobsStack]:
    with jobs_stack(SPEC) as running:
        yield running


def job_logs(stack: JobsStack, job_id: str) -> subprocess.CompletedProcess[str]:
    """`gpuplex job logs` as a user runs it, against the control plane only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLEX_")}
    env |= {
        "GPUPLEX_SERVER_URL": f"http://127.0.0.1:{stack.port}",
        "GPUPLEX_TOKEN": stack.token,
        "GPUPLEX_HOME": str(stack.control_home),
    }
    return subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "gpuplex.cli", "job", "logs", job_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env=env,
    )


def files_under(folder: Path) -> set[Path]:
    return {p.resolve() for p in folder.rglob("*")}


def test_job_logs_and_host_events_reach_a_control_plane_that_shares_only_the_store(
    stack: JobsStack,
) -> None:
    stack.start()
    store = Path(stack.store_url.removeprefix("sqlite:///")).parent
    folders = (stack.control_home, stack.state_dir, store)
    for one in folders:  # three folders, none inside another
        assert [o for o in folders if o != one and o.is_relative_to(one)] == []
    job_id = stack.submit(TENANT, {"gpu": {"count": 1}, "command": COMMAND, "name": "talk"})
    eventually(
        lambda: stack.show(TENANT, job_id)["state"] == "succeeded",
        "the job succeeded",
        90,
        lambda: stack.explain({job_id: TENANT}),
    )

    shown = job_logs(stack, job_id)
    assert shown.returncode == 0, shown.stderr
    banner = f"----- gpuplex: job-{job_id} attempt 1 starts at "  # the host's, in each stream
    lines = shown.stdout.splitlines()
    assert [line for line in lines if banner not in line] == [
        "stdout: to-stdout",
        "stdout: last-words",  # written after a pause, just before the job ended
        "stderr: to-stderr",
    ], stack.explain({job_id: TENANT})
    assert [line.split(": ")[0] for line in lines if banner in line] == ["stdout", "stderr"]

    events = stack.api("GET", "/events", params={"limit": 500})
    assert events.status_code == 200, events.text
    host = [e for e in events.json() if e["source"] == "host"]
    assert any(e["kind"] == "revision" for e in host), host  # the host ran the applied revision
    assert any(job_id in e["target"] or job_id in e["message"] for e in host), host
    # the control plane had none of it from the host's folder: its home holds no host file
    assert files_under(stack.control_home).isdisjoint(files_under(stack.state_dir))
    assert not (stack.control_home / "host").exists()
