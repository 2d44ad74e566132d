"""Acceptance: the runtime puts every replica in its own cgroup with the spec's limits (read back from
the cgroup filesystem), and a memory hog is killed by the kernel inside its cgroup while its
neighbour lives. Real cgroups: skipped where there are none, unless GPUPLEX_REQUIRE_CGROUPS=1."""

from __future__ import annotations

from pathlib import Path

from gpuplex.host.cgroups import Cgroups
from tests.integration.host.hostrun import (
    WORKLOAD,
    Host,
    alive,
    free_port_block,
    healthy,
    server,
    spec,
    wait_for,
)


def test_limits_applied_and_a_memory_hog_dies_alone(host: Host, cgroups: Cgroups) -> None:
    port = free_port_block(1)
    calm = server(
        "limits-calm",
        port,
        isolation="dedicated",
        workload={"limits": {"cpu_cores": 0.5, "memory_gib": 0.25, "pids": 64}},
    )
    hog = {
        "name": "limits-hog",
        "isolation": "dedicated",
        "workloads": [
            {
                "name": "eat",
                "kind": "batch",
                "gpu": {"count": 1},
                "command": [*WORKLOAD, "--host-memory-mib", "1024"],
                "limits": {"memory_gib": 0.125},
                "restart": {"policy": "never"},
            }
        ],
    }
    host.start_supervisor(host.write_spec(spec([calm, hog], [{"model": "H100-80GB", "count": 2}])))
    wait_for("calm healthy", lambda: healthy(port))
    wait_for("the hog stopped", lambda: host.phase("limits-hog/eat#0") == "completed")

    replicas = host.replicas()
    applied = replicas["limits-calm/svc#0"]["limits_applied"]
    assert applied == f"cgroup v{cgroups.version}: cpu 0.5 cores, memory 256 MiB, pids 64"
    dirs = [Path(d) for d in replicas["limits-calm/svc#0"]["cgroups"]]
    back = cgroups.read_back(dirs)
    assert (back.cpu_quota_us, back.cpu_period_us) == (50_000, 100_000)
    assert back.memory_max_bytes == 256 * 1024 * 1024
    assert back.pids_max == 64
    calm_pid = replicas["limits-calm/svc#0"]["pid"]
    assert calm_pid in cgroups.pids(dirs)  # the server itself runs inside, not just a wrapper

    hog_record = replicas["limits-hog/eat#0"]
    assert "SIGKILL" in (hog_record["last_exit"] or ""), hog_record
    assert cgroups.oom_kills([Path(d) for d in hog_record["cgroups"]]) >= 1
    assert cgroups.oom_kills(dirs) == 0
    assert alive(calm_pid)
    assert healthy(port)
    assert host.pid_of("limits-calm/svc#0") == calm_pid
