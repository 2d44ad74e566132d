"""The scenarios of `gpuplex bench isolation` and the gpuplex.yaml that runs each one. Pure: the
program, paths, start time and fleet are arguments.

Every scenario runs on one GPU. `exclusive` is one tenant alone (a dedicated GPU): the baseline.
`timeslice` is N plain concurrent processes; `mps-equal` N MPS clients with 100/N % of the threads
each; `mps-30-70` two MPS clients with 30 % and 70 %. The `steady+heavy` scenarios put a
well-behaved tenant (batch 1) beside a neighbour running a heavy loop, under time-slicing and MPS:
the steady tenant's p99 there against its p99 alone (`exclusive`, batch 1) is the interference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePath
from typing import Any


class SharingPattern(StrEnum):
    EXCLUSIVE = "exclusive"
    TIMESLICE = "timeslice"
    MPS = "mps"


@dataclass(frozen=True, slots=True)
class TenantLoad:
    name: str
    batch: int
    thread_percent: int | None = None  # MPS only


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    pattern: SharingPattern
    tenants: tuple[TenantLoad, ...]

    @property
    def batch(self) -> int:
        """The batch every tenant runs, or 0 where they differ (steady+heavy)."""
        batches = {tenant.batch for tenant in self.tenants}
        return batches.pop() if len(batches) == 1 else 0


STEADY = "steady"
LOOP_WORKLOAD = "loop"  # every tenant's one workload, one replica
HEAVY = "heavy"


def scenarios(batches: Sequence[int], copies: int, heavy_batch: int) -> list[Scenario]:
    """Per batch size: exclusive, timeslice, mps-equal, mps-30-70; then the two steady+heavy
    scenarios (whose baseline is exclusive at batch 1, added if batches lacks 1)."""
    if copies < 2:
        raise ValueError("sharing needs at least 2 copies")
    found: list[Scenario] = []
    for batch in dict.fromkeys([*batches, 1]):  # 1 last if it was not asked for
        names = [f"t{k + 1}" for k in range(copies)]
        equal = 100 // copies
        found += [
            Scenario(f"exclusive-b{batch}", SharingPattern.EXCLUSIVE, (TenantLoad("t1", batch),)),
            Scenario(
                f"timeslice-b{batch}",
                SharingPattern.TIMESLICE,
                tuple(TenantLoad(n, batch) for n in names),
            ),
            Scenario(
                f"mps-equal-b{batch}",
                SharingPattern.MPS,
                tuple(TenantLoad(n, batch, equal) for n in names),
            ),
            Scenario(
                f"mps-30-70-b{batch}",
                SharingPattern.MPS,
                (TenantLoad("t1", batch, 30), TenantLoad("t2", batch, 70)),
            ),
        ]
    found += [
        Scenario(
            "steady+heavy-timeslice",
            SharingPattern.TIMESLICE,
            (TenantLoad(STEADY, 1), TenantLoad(HEAVY, heavy_batch)),
        ),
        Scenario(
            "steady+heavy-mps",
            SharingPattern.MPS,
            (TenantLoad(STEADY, 1, 50), TenantLoad(HEAVY, heavy_batch, 50)),
        ),
    ]
    return found


@dataclass(frozen=True, slots=True)
class LoopProgram:
    """How each tenant's loop is started (see gpuplex.isolation_bench.loop)."""

    python: str
    backend: str
    width: int
    layers: int
    seconds: float
    memory_gib: float  # each tenant's share of GPU memory (MPS pins it)
    env: dict[str, str] = field(default_factory=dict)  # what `python` needs (host/interpreter.py)


def result_path(out_dir: PurePath, scenario: Scenario, tenant: TenantLoad) -> PurePath:
    return out_dir / f"{scenario.name}.{tenant.name}.json"


def go_path(out_dir: PurePath, scenario: Scenario) -> PurePath:
    """Where the harness writes the common start time once every tenant has warmed up."""
    return out_dir / f"{scenario.name}.go"


def scenario_spec(
    scenario: Scenario,
    program: LoopProgram,
    fleet: dict[str, Any],
    out_dir: PurePath,
    go_wait_s: float,
) -> dict[str, Any]:
    """The gpuplex.yaml document (as a dict) that runs `scenario` once on the fleet's one GPU; each
    loop waits `go_wait_s` at most for the start time once it is warm."""
    tenants = []
    for load in scenario.tenants:
        argv = [program.python, "-m", "gpuplex.isolation_bench.loop"]
        argv += ["--backend", program.backend, "--batch", str(load.batch)]
        argv += ["--width", str(program.width), "--layers", str(program.layers)]
        argv += ["--go", str(go_path(out_dir, scenario)), "--go-wait-s", f"{go_wait_s:g}"]
        argv += ["--seconds", f"{program.seconds:g}"]
        argv += ["--out", str(result_path(out_dir, scenario, load))]
        gpu: dict[str, Any] = {"count": 1}
        if scenario.pattern is not SharingPattern.EXCLUSIVE:
            gpu = {"memory_gib": program.memory_gib}
        if load.thread_percent is not None:
            gpu["compute_percent"] = load.thread_percent
        isolation = (
            "dedicated" if scenario.pattern is SharingPattern.EXCLUSIVE else scenario.pattern.value
        )
        workload = {
            "name": LOOP_WORKLOAD,
            "kind": "batch",
            "gpu": gpu,
            "command": argv,
            "env": dict(program.env),
            "restart": {"policy": "never", "stop_grace_s": 2},
        }
        tenants.append({"name": load.name, "isolation": isolation, "workloads": [workload]})
    return {"version": 1, "fleet": fleet, "tenants": tenants}
