"""Acceptance: one tenant's crash never touches another's processes; a crash loop is contained; a
killed gpuplex re-adopts its tenants without restarting them."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

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

H100 = {"model": "H100-80GB", "count": 3}


def _three_tenants(host: Host) -> tuple[dict[str, int], Path]:
    base = free_port_block(3)
    ports = {"ant": base, "bee": base + 1, "cat": base + 2}
    document = spec(
        [server(name, port, isolation="dedicated") for name, port in ports.items()], [H100]
    )
    return ports, host.write_spec(document)


def _all_healthy(ports: dict[str, int]) -> bool:
    return all(healthy(port) for port in ports.values())


class _Prober(threading.Thread):
    """Checks the given ports every 20 ms and counts every failed answer."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.checks = 0
        self.failures: list[tuple[int, float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            for port in self.ports:
                self.checks += 1
                if not healthy(port, timeout_s=2.0):
                    self.failures.append((port, time.monotonic()))
            time.sleep(0.02)


def test_kill_9_of_one_tenant_leaves_the_others_answering(host: Host) -> None:
    ports, spec_file = _three_tenants(host)
    host.start_supervisor(spec_file)
    wait_for("three healthy tenants", lambda: _all_healthy(ports))
    wait_for(
        "three running records", lambda: all(host.phase(f"{t}/svc#0") == "running" for t in ports)
    )
    pids = {t: host.pid_of(f"{t}/svc#0") for t in ports}

    prober = _Prober([ports["bee"], ports["cat"]])
    prober.start()
    time.sleep(0.3)
    victim = pids["ant"]
    assert victim is not None
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    wait_for(
        "ant restarted and healthy",
        lambda: host.pid_of("ant/svc#0") not in (None, victim) and healthy(ports["ant"]),
    )
    back_after_s = time.monotonic() - killed_at
    time.sleep(0.5)
    prober.stop_event.set()
    prober.join()

    assert prober.checks > 50
    assert prober.failures == [], f"neighbours failed health checks: {prober.failures}"
    # backoff_initial_s is 0.3: the supervisor notices within a tick (0.1 s) and the stand-in
    # server starts in well under a second.
    assert back_after_s < 0.3 + 3.0, back_after_s
    assert host.pid_of("bee/svc#0") == pids["bee"]
    assert host.pid_of("cat/svc#0") == pids["cat"]
    ant = host.record("ant/svc#0")
    assert ant is not None
    assert ant["restarts"] == 1
    assert "SIGKILL" in (ant["last_exit"] or "")
    for neighbour in ("bee", "cat"):
        record = host.record(f"{neighbour}/svc#0")
        assert record is not None
        assert record["restarts"] == 0


def test_crash_loop_is_marked_failed_and_touches_nobody_else(host: Host) -> None:
    base = free_port_block(2)
    crasher = server(
        "dog",
        base,
        "--crash-after-s",
        "0.05",
        isolation="dedicated",
        restart={
            "backoff_initial_s": 0.05,
            "backoff_max_s": 0.2,
            "max_restarts": 3,
            "window_s": 60,
        },
    )
    calm = server("eel", base + 1, isolation="dedicated")
    host.start_supervisor(
        host.write_spec(spec([crasher, calm], [{"model": "H100-80GB", "count": 2}]))
    )
    wait_for("eel healthy", lambda: healthy(base + 1))
    calm_pid = host.pid_of("eel/svc#0")
    wait_for("dog marked failed", lambda: host.phase("dog/svc#0") == "failed")
    dog = host.record("dog/svc#0")
    assert dog is not None
    assert dog["restarts"] == 3  # the first start and three restarts: four exits > max_restarts
    assert "crash loop" in dog["message"]
    assert "exit code 3" in dog["message"]
    time.sleep(0.5)  # failed stays failed: no more restarts
    assert host.record("dog/svc#0")["restarts"] == 3  # type: ignore[index]
    assert host.pid_of("eel/svc#0") == calm_pid
    assert calm_pid is not None
    assert alive(calm_pid)
    assert [e["target"] for e in host.events("failed")] == ["dog/svc#0"]
    replicas = host.replicas()
    assert replicas["eel/svc#0"]["restarts"] == 0
    assert replicas["eel/svc#0"]["alive"]


def test_kill_9_of_gpuplex_restarts_no_tenant(host: Host) -> None:
    ports, spec_file = _three_tenants(host)
    supervisor = host.start_supervisor(spec_file)
    wait_for("three healthy tenants", lambda: _all_healthy(ports))
    wait_for(
        "three running records", lambda: all(host.phase(f"{t}/svc#0") == "running" for t in ports)
    )
    pids = {t: host.pid_of(f"{t}/svc#0") for t in ports}
    started_before = len(host.events("started"))

    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait(timeout=10)
    assert all(pid is not None and alive(pid) for pid in pids.values())
    assert _all_healthy(ports)

    host.start_supervisor()  # no spec: carries on with the one applied before
    wait_for("re-adoption", lambda: len(host.events("adopted")) >= 3)
    time.sleep(1.0)  # ten reconcile passes with health checks

    assert {t: host.pid_of(f"{t}/svc#0") for t in ports} == pids
    assert len(host.events("started")) == started_before, "a tenant was restarted"
    replicas = host.replicas()
    for tenant, pid in pids.items():
        replica = replicas[f"{tenant}/svc#0"]
        assert replica["pid"] == pid
        assert replica["alive"]
        assert replica["phase"] == "running"
        assert replica["restarts"] == 0
    assert host.status()["supervisor_pid"] == host.supervisors[-1].pid


def test_a_job_without_a_port_runs_and_is_supervised(host: Host) -> None:
    job = {
        "name": "fox",
        "isolation": "dedicated",
        "workloads": [
            {
                "name": "train",
                "kind": "training",
                "gpu": {"count": 1},
                "command": [*WORKLOAD],
                "network": "none",
            }
        ],
    }
    host.apply(host.write_spec(spec([job], [{"model": "H100-80GB", "count": 1}])))
    wait_for("the job runs", lambda: host.pid_of("fox/train#0") is not None)
    pid = host.pid_of("fox/train#0")
    assert pid is not None
    assert alive(pid)
    # its own network namespace: not the host's
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    environ = dict(
        item.split("=", 1)
        for item in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in item
    )
    assert environ["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
    assert environ["GPUPLEX_TENANT"] == "fox"


def test_a_tenant_with_a_unix_user_runs_as_that_user_never_as_root(host: Host) -> None:
    def job(tenant: str, user: str) -> dict[str, object]:
        return {
            "name": tenant,
            "isolation": "dedicated",
            "unix_user": user,
            "workloads": [
                {"name": "job", "kind": "batch", "gpu": {"count": 1}, "command": WORKLOAD}
            ],
        }

    gpus = [{"model": "H100-80GB", "count": 2}]
    host.apply(host.write_spec(spec([job("gus", "nobody"), job("hal", "no-such-user")], gpus)))
    pid = host.pid_of("gus/job#0")
    assert pid is not None
    wait_for("gus runs", lambda: alive(pid))
    uids = next(
        line.split()[1:]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert set(uids) == {"65534"}  # real, effective, saved and filesystem uid: nobody
    hal = host.record("hal/job#0")
    assert hal is not None
    assert hal["pid"] is None
    assert "'no-such-user'" in hal["last_exit"]
    assert "does not exist" in hal["last_exit"]


def _ivy_job(command: list[str], **workload: Any) -> dict[str, Any]:
    """Tenant ivy with one batch workload `job` on a dedicated GPU."""
    job = {"name": "job", "kind": "batch", "gpu": {"count": 1}, "command": command, **workload}
    return {"name": "ivy", "isolation": "dedicated", "workloads": [job]}


def test_stop_is_sigterm_then_sigkill_after_the_grace_period(host: Host) -> None:
    # ignores SIGTERM, and its child too: only SIGKILL ends them
    stubborn = _ivy_job(
        ["/bin/sh", "-c", "trap '' TERM; sleep 300 & wait"], restart={"stop_grace_s": 1}
    )
    host.apply(host.write_spec(spec([stubborn], [{"model": "H100-80GB", "count": 1}])))
    pid = host.pid_of("ivy/job#0")
    assert pid is not None
    wait_for("the job and its child", lambda: len(_session_members(pid)) >= 2)
    members = _session_members(pid)
    started = time.monotonic()
    host.gpuplex("host", "down")
    took_s = time.monotonic() - started
    assert not any(alive(member) for member in members)  # the whole group, child included
    assert took_s >= 1.0  # it waited the grace period before SIGKILL


def _session_members(session: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session and alive(int(entry.name)):
                    members.append(int(entry.name))
            except ProcessLookupError:
                continue
    return members


DRAINS_ON_SIGTERM = """
import signal, sys, time
path = sys.argv[1]
def note(what):
    with open(path, "a") as out:
        out.write(f"{what} {time.monotonic()}\\n")
def drain(*_):
    note("term")
    time.sleep(1.5)  # finishing the requests in progress
    note("drained")
    sys.exit(0)
signal.signal(signal.SIGTERM, drain)
note("ready")
while True:
    time.sleep(1)
"""


def test_down_asks_every_replica_to_stop_before_waiting_for_any(host: Host) -> None:
    # in the tenant's own folder: the one place its (unprivileged) user may write
    notes = host.state_dir / "homes" / "ivy" / "notes.txt"
    draining = _ivy_job([WORKLOAD[0], "-c", DRAINS_ON_SIGTERM, str(notes)], replicas=3)
    host.apply(host.write_spec(spec([draining], [H100])))

    def said(what: str) -> list[float]:
        lines = notes.read_text().splitlines() if notes.exists() else []
        return [float(line.split()[1]) for line in lines if line.split()[0] == what]

    wait_for("three replicas ready", lambda: len(said("ready")) == 3)
    host.gpuplex("host", "down")
    terms, drained = said("term"), said("drained")
    assert len(terms) == 3, notes.read_text()  # one SIGTERM each, never a second
    assert len(drained) == 3, notes.read_text()
    # all three drained at the same time: every SIGTERM came before the first drain finished
    assert max(terms) < min(drained), notes.read_text()
