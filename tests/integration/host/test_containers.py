"""The container runtime, against a stand-in `docker` CLI (no engine runs on the test machines): the
run command carries the GPU by UUID, the limits, a read-only root, no capabilities and the tenant's
own network, and the container's process is supervised like any replica."""

from __future__ import annotations

import json
import os
import pwd
import signal
from pathlib import Path

from gpuplex.host.state import StateDir
from tests.integration.host.hostrun import Host, alive, spec, wait_for

FAKE_ENGINE = Path(__file__).parent / "fake_engine"


def test_a_container_replica_runs_with_its_limits_and_restarts(host: Host) -> None:
    calls_dir = host.root / "engine"
    host.env = {
        **os.environ,
        "PATH": f"{FAKE_ENGINE}:{os.environ['PATH']}",
        "FAKE_ENGINE_DIR": str(calls_dir),
    }
    tenant = {
        "name": "kit",
        "isolation": "dedicated",
        "workloads": [
            {
                "name": "api",
                "gpu": {"count": 1},
                "image": "registry.example/kit/api:1.2",
                "command": ["serve", "--port", "{port}"],
                "serve": {"model": "kit-api", "port": 9400},
                # its own CUDA_VISIBLE_DEVICES does not widen the GPU it was given
                "env": {"MODEL_DIR": "/models", "CUDA_VISIBLE_DEVICES": "all"},
                "limits": {"cpu_cores": 2, "memory_gib": 8, "pids": 256},
                "restart": {"backoff_initial_s": 0.2},
            }
        ],
    }
    document = spec([tenant], [{"model": "H100-80GB", "count": 1}], host={"runtime": "docker"})
    host.start_supervisor(host.write_spec(document))
    wait_for("the container runs", lambda: host.phase("kit/api#0") == "running")
    pid = host.pid_of("kit/api#0")
    assert pid is not None
    assert alive(pid)

    calls = [json.loads(line) for line in (calls_dir / "calls.jsonl").read_text().splitlines()]
    instance = StateDir(host.state_dir).instance  # two instances never share a name
    assert ["network", "create", "--label", "gpuplex=1", f"gpuplex-{instance}-kit"] in calls
    run = next(c for c in calls if c[0] == "run")
    gpu_uuid = host.status()["gpus"][0]["uuid"]
    tenant_user = pwd.getpwnam(f"gpx-{instance[:6]}-kit") if os.geteuid() == 0 else None
    if tenant_user is not None:  # as root: the tenant's own unprivileged user, as its processes
        option = ["--user", f"{tenant_user.pw_uid}:{tenant_user.pw_gid}"]
        assert any(run[i : i + 2] == option for i in range(len(run)))
    for option in (
        ["--name", f"gpuplex-{instance}-kit-api-0"],
        ["--label", f"gpuplex.instance={instance}"],
        ["--gpus", f"device={gpu_uuid}"],
        ["--cpus", "2"],
        ["--memory", "8192m"],
        ["--pids-limit", "256"],
        ["--cap-drop", "ALL"],
        ["--security-opt", "no-new-privileges"],
        ["--network", f"gpuplex-{instance}-kit"],
        ["--publish", "127.0.0.1:9400:9400"],
        ["--env", "MODEL_DIR=/models"],
        ["--env", f"CUDA_VISIBLE_DEVICES={gpu_uuid}"],
    ):
        assert any(run[i : i + 2] == option for i in range(len(run))), option
    assert ["--env", "CUDA_VISIBLE_DEVICES=all"] not in [run[i : i + 2] for i in range(len(run))]
    assert "--read-only" in run
    assert run[-4:] == ["registry.example/kit/api:1.2", "serve", "--port", "9400"]
    assert not any(arg.startswith("PATH=") for arg in run)  # the host's environment stays out

    os.kill(pid, signal.SIGKILL)  # the container's main process dies
    wait_for("a new container", lambda: host.pid_of("kit/api#0") not in (None, pid))
    record = host.record("kit/api#0")
    assert record is not None
    assert record["restarts"] == 1
    assert "exit code 137" in record["last_exit"]
