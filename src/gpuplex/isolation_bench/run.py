"""Run the scenarios of `gpuplex bench isolation` through the host runtime: for each one, write its
gpuplex.yaml, apply it (the runtime starts the MPS daemon, sets each client's thread percentage and
pinned-memory limit, or gives plain processes the GPU), wait for every tenant's loop to warm up, write
the common start time, wait for every loop to write its result, then `down` (replicas and the MPS
daemon stopped, also when something failed). The start waits for the slowest tenant, not for a fixed
time: on a loaded host one tenant may take seconds longer to start than another, and tenants that
measured at different times would say nothing about sharing."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.apply.model import WorkloadRecord
from gpuplex.errors import HostActionError
from gpuplex.host import session
from gpuplex.host.logs import log_paths
from gpuplex.host.proc import group_has_running_process
from gpuplex.host.state import StateDir
from gpuplex.isolation_bench.loop import ready_path
from gpuplex.isolation_bench.results import ScenarioResult, TenantRun, scenario_result
from gpuplex.isolation_bench.scenarios import (
    LOOP_WORKLOAD,
    LoopProgram,
    Scenario,
    TenantLoad,
    go_path,
    result_path,
    scenario_spec,
)
from gpuplex.settings import HostSettings
from gpuplex.specfile import load_spec_file

#: One simulated GPU for --driver sim; with NVML the host's GPUs are discovered.
SIM_FLEET: dict[str, Any] = {
    "nodes": [{"name": "bench", "gpus": [{"model": "H100-80GB", "count": 1}]}]
}
DISCOVERED_FLEET: dict[str, Any] = {"discover": True}

#: From writing the start time to the start: every waiting loop reads it within 10 ms.
GO_AHEAD_S = 0.5
#: A warm loop waits for the start time this much longer than the harness waits for the slowest
#: tenant; past that the harness is gone (killed) and the loop ends rather than wait for ever.
GO_WAIT_MARGIN_S = 30.0


@dataclass(frozen=True, slots=True)
class BenchSettings:
    work_dir: Path  # specs, results, and the host runtime's state directory
    driver: str  # sim | nvml
    program: LoopProgram
    startup_s: float  # how long each tenant may take to be ready: imports, CUDA start, warm-up
    node: str | None = None


def run_all(
    scenarios: Sequence[Scenario],
    settings: BenchSettings,
    on_done: Callable[[ScenarioResult], None] = lambda _: None,
) -> list[ScenarioResult]:
    results = []
    for scenario in scenarios:
        result = run_one(scenario, settings)
        on_done(result)
        results.append(result)
    return results


def run_one(scenario: Scenario, settings: BenchSettings) -> ScenarioResult:
    host = HostSettings(
        state_dir=settings.work_dir / "state", node=settings.node, driver=settings.driver
    )
    # each tenant's loop, as the tenant's own user, writes its result here (like /tmp: anyone may
    # add a file, only its owner may replace it). Inside the host runtime's state directory, the
    # one folder of the host's /tmp a tenant's private /tmp passes through: nothing is guessed
    # from a command's arguments any more (host/launcher.py `kept_visible`).
    out_dir = host.state_dir / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out_dir.chmod(0o1733)
    go = Path(go_path(out_dir, scenario))
    results = {load.name: Path(result_path(out_dir, scenario, load)) for load in scenario.tenants}
    for path in (go, *results.values(), *map(ready_path, results.values())):
        path.unlink(missing_ok=True)  # a rerun in the same directory starts clean
    fleet = SIM_FLEET if settings.driver == "sim" else DISCOVERED_FLEET
    go_wait_s = settings.startup_s + GO_WAIT_MARGIN_S
    document = scenario_spec(scenario, settings.program, fleet, out_dir, go_wait_s)
    spec_path = settings.work_dir / "specs" / f"{scenario.name}.yaml"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    spec = load_spec_file(spec_path)
    try:
        applied = session.apply(spec, spec_path.read_bytes(), spec_path, host, dry_run=False)
        _check_one_gpu(scenario, applied)
        records = {r.desired.tenant: r for r in StateDir(host.state_dir).read_state().records}
        ready_by = now_s() + settings.startup_s
        for load in scenario.tenants:
            ready = ready_path(results[load.name])
            _wait_for(ready, "ready file", scenario, load, host, ready_by, records)
        start_at = now_s() + GO_AHEAD_S
        _write_for_everyone(go, f"{start_at:.3f}")
        deadline = start_at + settings.program.seconds + 30.0
        runs = []
        for load in scenario.tenants:
            _wait_for(results[load.name], "result", scenario, load, host, deadline, records)
            runs.append(_tenant_run(load.name, results[load.name]))
    finally:
        if host.state_dir.is_dir():  # else apply failed before making anything: its error stands
            session.down(host, forget_users=True)  # the benchmark's tenants are its own
    return scenario_result(scenario, runs)


def _check_one_gpu(scenario: Scenario, applied: session.Applied) -> None:
    if applied.plan.infeasible:
        reasons = "; ".join(f"{u.label()}: {', '.join(u.reasons)}" for u in applied.plan.infeasible)
        raise HostActionError(f"{scenario.name} could not be placed: {reasons}")
    gpus = {(p.node, tuple(p.gpu_indices)) for p in applied.plan.placements}
    if len(gpus) != 1:
        raise HostActionError(
            f"{scenario.name}'s tenants were spread over {len(gpus)} GPUs; the benchmark needs "
            "them on one (run it on a host with one GPU free)"
        )


def _write_for_everyone(path: Path, text: str) -> None:
    """Whole or not at all, and readable by the tenants' users."""
    partial = path.with_suffix(".partial")
    partial.write_text(text, encoding="ascii")
    partial.chmod(0o644)
    partial.replace(path)


def _wait_for(
    path: Path,
    noun: str,
    scenario: Scenario,
    load: TenantLoad,
    host: HostSettings,
    deadline: float,
    records: dict[str, WorkloadRecord],
) -> None:
    """Until the tenant's loop has written `path` (its ready file, its result); an error with the
    loop's output if it ended first or the deadline passed."""
    tenant = load.name
    record = records.get(tenant)
    while not path.exists():
        ended = record is None or record.pid is None or not group_has_running_process(record.pid)
        if ended and not path.exists():
            raise HostActionError(
                f"{scenario.name}: {tenant}'s loop ended without a {noun}; its output ends:\n"
                + _log_tail(host, tenant)
            )
        if now_s() > deadline:
            raise HostActionError(
                f"{scenario.name}: {tenant} wrote no {noun} in time; its output ends:\n"
                + _log_tail(host, tenant)
            )
        sleep_s(0.1)


def _tenant_run(tenant: str, path: Path) -> TenantRun:
    raw = json.loads(path.read_text(encoding="utf-8"))
    observed = raw.get("mps_thread_percent")
    return TenantRun(
        tenant=tenant,
        batch=int(raw["batch"]),
        # as the loop saw it in its environment: what the host runtime set, not what was asked
        thread_percent=None if observed is None else int(observed),
        latencies_s=tuple(float(x) for x in raw["latencies_s"]),
        window_s=float(raw["window_s"]),
        started_at=float(raw["started_at"]),
        late_s=float(raw["late_s"]),
    )


def _log_tail(host: HostSettings, tenant: str, lines: int = 20) -> str:
    tail = []
    for path in log_paths(StateDir(host.state_dir).logs, tenant, f"{LOOP_WORKLOAD}-0"):
        if path.exists():
            tail += path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    return "\n".join(tail) or "(nothing)"
