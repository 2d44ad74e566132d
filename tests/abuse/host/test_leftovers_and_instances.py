"""Items 2 and 3 of the host abuse list, against the real host runtime and this machine's cgroups:

- a workload that forks a detached daemon (`setsid`) and exits leaves nothing behind, neither
  across restarts, nor once it is failed, nor after `host down`, which also finds processes in
  cgroups of the instance that no record names, and says so;
- two instances (two state directories) with the same tenant names run side by side; applying,
  restarting and bringing one down never changes the other's processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gpuplex.core.spec.runtime import LimitsSpec
from gpuplex.host.cgroups import Cgroups, instance_parent
from gpuplex.host.state import StateDir
from tests.e2e.processes import processes_with_argument
from tests.integration.host.hostrun import (
    Host,
    alive,
    free_port_block,
    healthy,
    server,
    spec,
    wait_for,
)

pytestmark = pytest.mark.stacks

GPUS = [{"model": "H100-80GB", "count": 1}]


def forker(marker: str, **restart: float) -> dict[str, object]:
    """A batch workload that starts a detached daemon (its own session, outside the replica's
    process group) and exits 3: what a careless or hostile tenant's program does."""
    script = f"setsid sleep {marker} </dev/null >/dev/null 2>&1 & sleep 0.3; exit 3"
    return {
        "name": "forker",
        "isolation": "dedicated",
        "workloads": [
            {
                "name": "job",
                "kind": "batch",
                "gpu": {"count": 1},
                "command": ["/bin/sh", "-c", script],
                "restart": {"policy": "always", "backoff_initial_s": 0.2, "backoff_max_s": 0.4}
                | restart,
            }
        ],
    }


def test_a_detached_daemon_dies_with_each_run_and_a_failed_replica_leaves_nothing(
    host: Host, cgroups: Cgroups
) -> None:
    marker = f"{3000 + os.getpid() % 1000}.{time.monotonic_ns() % 10**6}"  # a unique `sleep` arg
    document = spec([forker(marker, max_restarts=4, window_s=60)], GPUS)
    host.start_supervisor(host.write_spec(document))
    wait_for("two exits", lambda: len(host.events("exited")) + len(host.events("failed")) >= 2, 30)
    # each run's daemon is killed when the run ends: never more than the current run's one
    assert len(processes_with_argument(marker)) <= 1
    wait_for("the crash loop", lambda: host.phase("forker/job#0") == "failed", 60)
    wait_for("no daemon left once failed", lambda: processes_with_argument(marker) == [], 5)

    down = host.gpuplex("host", "down")
    assert "nothing of this gpuplex instance runs" in down.stdout
    assert processes_with_argument(marker) == []


def test_down_stops_what_runs_in_an_unrecorded_cgroup_of_its_instance_and_names_it(
    host: Host, cgroups: Cgroups
) -> None:
    port = free_port_block(1)
    host.apply(host.write_spec(spec([server("tenant-a", port)], GPUS)))
    wait_for("healthy", lambda: healthy(port))
    # a process in a cgroup of this instance that no record names (a replica of a spec applied
    # long ago, a record lost in a crash): `down` must find it by the cgroup alone
    instance = Cgroups.detect(parent=instance_parent(StateDir(host.state_dir).instance))
    assert instance is not None
    dirs = instance.create("ghost", "old-0", LimitsSpec())
    marker = f"{4000 + os.getpid() % 1000}.5"
    ghost = subprocess.Popen(  # noqa: S603 - our own test process
        ["/bin/sh", "-c", 'for f; do echo $$ > "$f"; done; exec sleep ' + marker, "join"]
        + [str(path) for path in instance.procs_files(dirs)],
        start_new_session=True,
    )
    wait_for("the ghost in its cgroup", lambda: ghost.pid in instance.pids(dirs), 5)

    down = host.gpuplex("host", "down")
    assert "leftovers_stopped" in down.stdout
    assert "ghost/old-0" in down.stdout
    ghost.wait(timeout=5)
    assert processes_with_argument(marker) == []
    assert not any(path.exists() for path in dirs)  # and its cgroup is removed


def test_down_of_a_state_dir_that_does_not_exist_says_so(host: Host) -> None:
    done = host.gpuplex("host", "down", check=False)
    assert done.returncode != 0
    assert "no state directory" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_two_instances_with_the_same_tenant_names_never_touch_each_other(
    host: Host, other_host: Host, cgroups: Cgroups
) -> None:
    ports = free_port_block(2)
    first = host.write_spec(spec([server("twin", ports)], GPUS))
    second = other_host.write_spec(spec([server("twin", ports + 1)], GPUS))
    host.apply(first)
    other_host.apply(second)
    wait_for("both healthy", lambda: healthy(ports) and healthy(ports + 1))
    pid = host.pid_of("twin/svc#0")
    assert pid is not None
    record = host.record("twin/svc#0")
    assert record is not None
    mine = [Path(d) for d in record["cgroups"]]
    theirs = other_host.record("twin/svc#0")
    assert theirs is not None
    assert set(mine).isdisjoint(Path(d) for d in theirs["cgroups"])
    assert StateDir(host.state_dir).instance in str(mine[0])

    def untouched() -> None:
        assert alive(pid)
        assert host.pid_of("twin/svc#0") == pid
        assert pid in cgroups.pids(mine)

    # the other instance: applied again with a change (its replica restarts), its replica
    # killed (restarted by its supervisor), then brought down
    changed = spec([server("twin", ports + 1, workload={"env": {"CHANGED": "1"}})], GPUS)
    other_host.apply(other_host.write_spec(changed))
    untouched()
    other_host.start_supervisor()
    their_pid = other_host.pid_of("twin/svc#0")
    assert their_pid is not None
    os.kill(their_pid, signal.SIGKILL)
    wait_for("their restart", lambda: other_host.pid_of("twin/svc#0") not in (None, their_pid))
    wait_for("theirs healthy again", lambda: healthy(ports + 1))
    untouched()
    other_host.close()
    assert not healthy(ports + 1)
    untouched()
    assert healthy(ports)
