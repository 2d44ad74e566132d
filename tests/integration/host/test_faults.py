"""Acceptance: a crashed MPS daemon restarts with only its own GPU's clients; the VRAM watchdog stops
the share that overruns its memory and nobody else."""

from __future__ import annotations

import os
import signal
import time

from tests.integration.host.hostrun import (
    Host,
    alive,
    free_port_block,
    healthy,
    post,
    server,
    spec,
    wait_for,
)


def test_mps_daemon_crash_restarts_only_that_gpus_clients(host: Host) -> None:
    base = free_port_block(4)
    share = {"memory_gib": 8, "compute_percent": 30}
    tenants = [
        server("ann", base, isolation="mps", gpu=share, never_share_with=["bob"]),
        server("bob", base + 1, isolation="mps", gpu=share),
        server("cy", base + 2, isolation="dedicated"),
    ]
    host.start_supervisor(host.write_spec(spec(tenants, [{"model": "H100-80GB", "count": 3}])))
    ports = {"ann": base, "bob": base + 1, "cy": base + 2}
    wait_for("all healthy", lambda: all(healthy(p) for p in ports.values()))
    wait_for("all running", lambda: all(host.phase(f"{t}/svc#0") == "running" for t in ports))
    daemons = {d["gpu_index"]: d["pid"] for d in host.state()["mps_daemons"]}
    assert len(daemons) == 2, daemons
    gpu_of = {t: host.record(f"{t}/svc#0")["desired"]["binding"]["gpu_indices"][0] for t in ports}  # type: ignore[index]
    assert gpu_of["ann"] != gpu_of["bob"]
    pids = {t: host.pid_of(f"{t}/svc#0") for t in ports}

    crashed_gpu = gpu_of["ann"]
    os.kill(daemons[crashed_gpu], signal.SIGKILL)  # the daemon dies, as after a fatal client fault
    wait_for(
        "a new daemon and a new ann",
        lambda: (
            {d["gpu_index"]: d["pid"] for d in host.state()["mps_daemons"]}.get(crashed_gpu)
            not in (None, daemons[crashed_gpu])
            and host.pid_of("ann/svc#0") not in (None, pids["ann"])
            and healthy(ports["ann"])
        ),
    )
    time.sleep(0.5)
    after = {d["gpu_index"]: d for d in host.state()["mps_daemons"]}
    assert after[gpu_of["bob"]]["pid"] == daemons[gpu_of["bob"]]  # the other GPU's daemon untouched
    assert after[crashed_gpu]["restarts"] == 1
    assert host.pid_of("bob/svc#0") == pids["bob"]
    assert host.pid_of("cy/svc#0") == pids["cy"]
    died = host.events("mps_daemon_died")
    assert [e["target"] for e in died] == [f"GPU {crashed_gpu}"]
    stopped = [e["target"] for e in host.events("stopped")]
    assert stopped == ["ann/svc#0"], stopped
    # the restarted client talks to its GPU's daemon through that daemon's own pipe directory
    environ = _environ(host.pid_of("ann/svc#0"))
    assert environ["CUDA_MPS_PIPE_DIRECTORY"] == after[crashed_gpu]["pipe_dir"]
    assert environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
    assert environ["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=8192M"
    assert "CUDA_VISIBLE_DEVICES" not in environ


def test_vram_watchdog_stops_the_share_over_its_memory(host: Host) -> None:
    base = free_port_block(2)
    share = {"memory_gib": 4}
    tenants = [
        server("dan", base, "--gpu-memory-mib", "3000", isolation="timeslice", gpu=share),
        server("eve", base + 1, "--gpu-memory-mib", "3500", isolation="timeslice", gpu=share),
    ]
    document = spec(
        tenants, [{"model": "H100-80GB", "count": 1}], host={"vram_tolerance_percent": 10}
    )
    host.start_supervisor(host.write_spec(document))
    wait_for("both healthy", lambda: healthy(base) and healthy(base + 1))
    wait_for(
        "both running", lambda: host.phase("dan/svc#0") == host.phase("eve/svc#0") == "running"
    )
    status = host.replicas()
    assert status["dan/svc#0"]["observed_memory_mib"] == 3000
    assert status["eve/svc#0"]["observed_memory_mib"] == 3500
    dan, eve = host.pid_of("dan/svc#0"), host.pid_of("eve/svc#0")
    assert dan is not None
    assert eve is not None

    assert post(base, "/sim/gpu-memory?mib=4600") == 200  # 4096 planned + 10 % = 4505 allowed
    wait_for("dan stopped", lambda: not alive(dan))
    events = host.events("vram_exceeded")
    assert len(events) == 1
    fields = events[0]["fields"]
    assert fields == {
        "tenant": "dan",
        "workload": "svc",
        "planned_mib": 4096,
        "observed_mib": 4600,
        "limit_mib": 4505,
    }
    assert "VRAM watchdog" in events[0]["message"]
    assert alive(eve)
    assert host.pid_of("eve/svc#0") == eve
    assert healthy(base + 1)
    # dan restarts after its backoff, back to its normal 3000 MiB
    wait_for("dan back", lambda: host.pid_of("dan/svc#0") not in (None, dan) and healthy(base))
    assert host.record("eve/svc#0")["restarts"] == 0  # type: ignore[index]


def _environ(pid: int | None) -> dict[str, str]:
    assert pid is not None
    with open(f"/proc/{pid}/environ", "rb") as raw:
        items = raw.read().decode().split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)
