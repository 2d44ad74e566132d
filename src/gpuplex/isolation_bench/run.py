"""Run the scenarios of `gpuplex bench isolation` through the host runtime: for each one, write its
gpuplex.yaml, apply it (the runtime starts the MPS daemon, sets each client's thread percentage and
pinned-memory limit, or gives plain processes the GPU), wait for every tenant's loop to write its
result, then `down` (replicas and the MPS daemon stopped, also when something failed)."""

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
from gpuplex.isolation_bench.results import ScenarioResult, TenantRun, scenario_result
from gpuplex.isolation_bench.scenarios import (
    LOOP_WORKLOAD,
    LoopProgram,
    Scenario,
    TenantLoad,
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


@dataclass(frozen=True, slots=True)
class BenchSettings:
    work_dir: Path  # specs, results, and the host runtime's state directory
    driver: str  # sim | nvml
    program: LoopProgram
    startup_s: float  # from apply to the common start: imports, CUDA start, warm-up
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
    for load in scenario.tenants:  # a rerun in the same directory starts clean
        Path(result_path(out_dir, scenario, load)).unlink(missing_ok=True)
    fleet = SIM_FLEET if settings.driver == "sim" else DISCOVERED_FLEET
    start_at = now_s() + settings.startup_s
    document = scenario_spec(scenario, settings.program, fleet, out_dir, start_at)
    spec_path = settings.work_dir / "specs" / f"{scenario.name}.yaml"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    spec = load_spec_file(spec_path)
    try:
        applied = session.apply(spec, spec_path.read_bytes(), spec_path, host, dry_run=False)
        _check_one_gpu(scenario, applied)
        deadline = start_at + settings.program.seconds + max(30.0, settings.startup_s)
        records = {r.desired.tenant: r for r in StateDir(host.state_dir).read_state().records}
        runs = [
            _wait_for_result(scenario, load, out_dir, host, deadline, records.get(load.name))
            for load in scenario.tenants
        ]
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


def _wait_for_result(
    scenario: Scenario,
    load: TenantLoad,
    out_dir: Path,
    host: HostSettings,
    deadline: float,
    record: WorkloadRecord | None,
) -> TenantRun:
    tenant = load.name
    path = Path(result_path(out_dir, scenario, load))
    while not path.exists():
        ended = record is None or record.pid is None or not group_has_running_process(record.pid)
        if ended and not path.exists():
            raise HostActionError(
                f"{scenario.name}: {tenant}'s loop ended without a result; its output ends:\n"
                + _log_tail(host, tenant)
            )
        if now_s() > deadline:
            raise HostActionError(
                f"{scenario.name}: {tenant} wrote no result in time; its output ends:\n"
                + _log_tail(host, tenant)
            )
        sleep_s(0.1)
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
