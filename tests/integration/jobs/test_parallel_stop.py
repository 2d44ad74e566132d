"""Jobs stopped together drain together, and the host keeps working meanwhile: the real host
runtime (its process runtime, cgroups where there are some, the tenants' users) stops three jobs,
two of which ignore SIGTERM, in one pass that does not wait, starts another job in that same pass,
and SIGKILLs the stubborn ones on a later pass once their one shared grace period is over. How
each run ended is kept for the control plane, and each run's logs start with its attempt."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.core.apply.model import (
    Binding,
    DesiredHost,
    GpuDesired,
    Phase,
    WorkloadDesired,
)
from gpuplex.core.jobs.live import attempt_env
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.core.spec.runtime import Network, RestartSpec
from gpuplex.host.proc import is_same_process
from gpuplex.host.runtime import HostRuntime
from gpuplex.host.state import StateDir
from gpuplex.host.wiring import open_driver, open_runtime
from gpuplex.settings import HostSettings

GRACE_S = 3.0
#: exits 143 on SIGTERM
POLITE = "trap 'exit 143' TERM; sleep 300 & wait"
#: ignores SIGTERM (and so does its child, which inherits the ignored signal): only SIGKILL ends it
STUBBORN = "trap '' TERM; sleep 300 & wait"


def job(name: str, gpu: int, script: str) -> WorkloadDesired:
    return WorkloadDesired(
        tenant="acme",
        workload=name,
        replica=0,
        binding=Binding(mode=Mode.DEDICATED, gpu_indices=[gpu], memory_mib=81920),
        argv=["/bin/sh", "-c", script],
        env=attempt_env(0),
        restart=RestartSpec(policy="never", stop_grace_s=GRACE_S),  # type: ignore[arg-type]
        network=Network.NONE,
    )


def host(*jobs: WorkloadDesired) -> DesiredHost:
    gpus = [GpuDesired(index=i, model="H100-80GB", mig_slices=None, mps=False) for i in range(4)]
    return DesiredHost(node="box", gpus=gpus, workloads=list(jobs))


@pytest.fixture
def runtime() -> Iterator[HostRuntime]:
    with tempfile.TemporaryDirectory(prefix="gpuplex-stops-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)  # the tenants' users pass through to their own folders
        settings = HostSettings(state_dir=root / "host", node="box", driver="sim")
        dirs = StateDir(settings.state_dir)
        dirs.create()
        node = NodeSpec.model_validate(
            {"name": "box", "gpus": [{"model": "H100-80GB", "count": 4}]}
        )
        opened = open_driver(settings, dirs, node)
        running = open_runtime(settings, dirs, opened.driver)
        try:
            yield running
        finally:
            running.stopping_everything = "the test is over"
            running.ask_all_to_stop()
            deadline = time.monotonic() + GRACE_S + 10
            while time.monotonic() < deadline:
                running.tick(host())
                if not running.stopping():
                    break
                time.sleep(0.05)
            running.sweep()
            running.close()
            opened.driver.close()


def test_jobs_stopped_together_drain_together_while_the_host_keeps_working(
    runtime: HostRuntime,
) -> None:
    first = [job("job-a", 0, STUBBORN), job("job-b", 1, STUBBORN), job("job-c", 2, POLITE)]
    runtime.tick(host(*first))
    pids = {r.desired.workload: r.pid for r in runtime.state.records}
    assert all(pids.values()), runtime.events
    time.sleep(0.5)  # the shells set their traps

    newcomer = job("job-d", 3, POLITE)
    began = time.monotonic()
    runtime.tick(host(newcomer))  # the three leave, the newcomer arrives
    took = time.monotonic() - began
    assert took < 1.0, f"a pass that stops three jobs took {took:.1f} s"
    phases = {r.desired.workload: r.phase for r in runtime.state.records}
    assert phases["job-d"] in (Phase.STARTING, Phase.RUNNING)  # started in the same pass
    assert {phases[n] for n in ("job-a", "job-b")} == {Phase.STOPPING}

    gone: dict[str, float] = {}
    while len(gone) < 3 and time.monotonic() - began < GRACE_S + 5:
        runtime.tick(host(newcomer))
        present = {r.desired.workload for r in runtime.state.records}
        for name in ("job-a", "job-b", "job-c"):
            if name not in present and name not in gone:
                gone[name] = time.monotonic() - began
        time.sleep(0.05)
    assert set(gone) == {"job-a", "job-b", "job-c"}, runtime.events
    assert gone["job-c"] < 1.5  # the polite one left at once
    # the stubborn ones shared one grace period: SIGKILL after it, not one grace after another
    assert GRACE_S - 0.2 <= gone["job-a"] <= GRACE_S + 1.5, gone
    assert GRACE_S - 0.2 <= gone["job-b"] <= GRACE_S + 1.5, gone
    for name in ("job-a", "job-b", "job-c"):
        pid = pids[name]
        assert pid is not None
        assert not is_same_process(pid, None)

    ended = {f.label.split("/")[1].split("#")[0]: f for f in runtime.state.finished}
    assert {n: ended[n].exit_code for n in ("job-a", "job-b", "job-c")} == {
        "job-a": 137,
        "job-b": 137,
        "job-c": 143,
    }
    assert all(ended[n].stopped_by == "no longer in the plan" for n in ended)
    assert all(ended[n].attempt == 0 for n in ended)
    stopping = [e for e in runtime.events if e.kind == "stopping"]
    assert len(stopping) == 3
    stdout = (runtime.dirs.logs / "acme" / "job-d-0.stdout.log").read_text()
    assert stdout.startswith("----- gpuplex: job-d attempt 1 starts at ")


def test_a_job_that_exits_as_soon_as_down_asks_is_still_stopped_by_gpuplex(
    runtime: HostRuntime,
) -> None:
    """`down` (`host down`, the end of `gpuplex up`) SIGTERMs every replica before its pass; a job
    that exits at once may be gone before the pass looks (a loaded machine: a full CI run once
    lost a job this way). Its run still ended because gpuplex stopped it: the control plane
    queues it again rather than calling it failed with exit 143."""
    runtime.tick(host(job("job-a", 0, POLITE)))
    (record,) = runtime.state.records
    assert record.pid is not None, runtime.events
    time.sleep(0.5)  # the shell sets its trap
    runtime.stopping_everything = "`gpuplex up` stopped"
    runtime.ask_all_to_stop()
    deadline = time.monotonic() + 10
    while is_same_process(record.pid, record.start_ticks) and time.monotonic() < deadline:
        time.sleep(0.05)  # gone before the pass below looks
    assert not is_same_process(record.pid, record.start_ticks)
    runtime.tick(host())
    (ended,) = runtime.state.finished
    assert ended.exit_code == 143
    assert ended.stopped_by == "`gpuplex up` stopped", runtime.events
    assert not runtime.state.records, runtime.state.records  # nothing left to stop or restart
