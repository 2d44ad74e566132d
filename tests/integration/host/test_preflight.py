"""`host apply` refuses, before it changes anything, a spec whose replicas could not start: a
command that is not on the replica's PATH (a bare `python` without the virtualenv on it), or one
that the tenant's unprivileged user cannot run (a program in a folder closed to others)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.host.hostrun import Host, spec, wait_for

GPUS = [{"model": "H100-80GB", "count": 1}]


def job(command: list[str]) -> dict[str, object]:
    workload = {"name": "job", "kind": "batch", "gpu": {"count": 1}, "command": command}
    return {"name": "ivy", "isolation": "dedicated", "workloads": [workload]}


def test_a_command_not_on_the_path_is_refused_before_anything_changes(host: Host) -> None:
    path = host.write_spec(spec([job(["no-such-program-xyz", "--serve"])], GPUS))
    done = host.gpuplex("host", "apply", str(path), "--driver", "sim", check=False)
    assert done.returncode == 1
    assert "nothing was changed" in done.stderr
    assert "ivy/job: the command `no-such-program-xyz` is not on the replica's PATH" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (host.state_dir / "state.json").exists()  # nothing was started or recorded

    dry = host.gpuplex("host", "apply", str(path), "--driver", "sim", "--dry-run")
    assert "would not start" in dry.stdout
    assert "no-such-program-xyz" in dry.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="tenant users exist only when gpuplex runs as root")
def test_a_program_the_tenants_user_cannot_reach_is_refused(host: Host, tmp_path: Path) -> None:
    closed = tmp_path / "closed"  # like a virtualenv under /root: 700
    closed.mkdir(mode=0o700)
    program = closed / "serve"
    program.write_text("#!/bin/sh\nexec sleep 60\n")
    program.chmod(0o755)
    path = host.write_spec(spec([job([str(program)])], GPUS))
    done = host.gpuplex("host", "apply", str(path), "--driver", "sim", check=False)
    assert done.returncode == 1
    assert f"ivy/job: the command `{program}`" in done.stderr
    assert "which the tenant's own user cannot run" in done.stderr
    assert not (host.state_dir / "state.json").exists()


def test_status_points_at_the_log_of_a_replica_that_is_gone(host: Host) -> None:
    failing = job(["/bin/sh", "-c", "echo 'no module named boom-marker' >&2; exit 3"])
    failing["workloads"][0]["restart"] = {"policy": "never"}  # type: ignore[index]
    host.apply(host.write_spec(spec([failing], GPUS)))
    # one pass and no supervisor: the record still says starting while the pid is gone
    wait_for("the exit", lambda: not host.replicas()["ivy/job#0"]["alive"])
    table = re.sub(r"[\s│]", "", host.gpuplex("host", "status").stdout)  # cells wrap
    assert "job-0.stderr.log:nomodulenamedboom-marker" in table  # in the replica's note
    replica = host.replicas()["ivy/job#0"]
    assert replica["stderr_log"].endswith("/logs/ivy/job-0.stderr.log")
    assert replica["stderr_last_line"] == "no module named boom-marker"
