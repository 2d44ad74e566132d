"""The spec the host runtime runs when there is no GPU: the same tenants, workloads and placement,
with each command replaced by a stand-in that holds simulated GPU memory — the simulated
OpenAI-compatible model server for served models (with the LoRA adapters riding on it), the
simulated workload for batch and training jobs — except the workloads named to run for real
(`gpuplex up --real-commands`, `--real TENANT/WORKLOAD`): those run their own command, a real
model server on simulated GPUs, as the spec says, folders granted in `reads` included. A stand-in
reads none of the folders granted to the command it replaces."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Collection, Sequence

from gpuplex.core.plan import Plan
from gpuplex.core.serve.routes import adapter_name
from gpuplex.core.spec import GpuplexSpec, WorkloadSpec
from gpuplex.host.interpreter import python_for_others

#: Share of its planned GPU memory a stand-in holds, so the GPU map shows used below planned.
HELD_SHARE = 0.7


def simulated_spec(
    spec: GpuplexSpec,
    plan: Plan,
    python: str = sys.executable,
    python_env: dict[str, str] | None = None,
    real: Collection[str] = (),
) -> GpuplexSpec:
    """`python` (with `python_env` added to each stand-in's environment) must be runnable by the
    tenants' users: see host/interpreter.py. The workloads in `real` (`tenant/workload`) keep
    their own commands."""
    adapters = _adapters_by_base(spec)
    tenants = []
    for tenant in spec.tenants:
        workloads = []
        for workload in tenant.workloads:
            if workload.command is None or f"{tenant.name}/{workload.name}" in real:
                workloads.append(workload)
                continue
            held_mib = _held_mib(plan, tenant.name, workload.name)
            command = _stand_in(
                python, workload, adapters.get(f"{tenant.name}/{workload.name}", []), held_mib
            )
            env = workload.env | (python_env or {})
            update = {"command": command, "image": None, "env": env, "reads": []}
            workloads.append(workload.model_copy(update=update))
        tenants.append(tenant.model_copy(update={"workloads": workloads}))
    return spec.model_copy(update={"tenants": tenants})


def _stand_in(
    python: str, workload: WorkloadSpec, adapters: Sequence[str], held_mib: int
) -> list[str]:
    """The model name is what the gateway asks the server for (the base model where there is
    one), and each adapter is named as the gateway names it."""
    if workload.serve is not None and workload.serve.port is not None:
        command = [python, "-m", "gpuplex.cli", "sim", "model", "--port", "{port}"]
        command += ["--model", workload.serve.base_model or workload.serve.model]
        for adapter in adapters:
            command += ["--adapter", adapter]
        return [*command, "--gpu-memory-mib", str(held_mib), "--decode-ms-per-token", "2"]
    return [python, "-m", "gpuplex.sim.workload", "--gpu-memory-mib", str(held_mib)]


def _adapters_by_base(spec: GpuplexSpec) -> dict[str, list[str]]:
    adapters: dict[str, list[str]] = {}
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.serve is not None and workload.serve.lora_of is not None:
                name = adapter_name(tenant.name, workload.name)
                adapters.setdefault(workload.serve.lora_of, []).append(name)
    return adapters


def _held_mib(plan: Plan, tenant: str, workload: str) -> int:
    planned = [
        p.memory_mib for p in plan.placements if (p.tenant, p.workload) == (tenant, workload)
    ]
    return int(min(planned) * HELD_SHARE) if planned else 1024


def with_stand_ins(spec: GpuplexSpec, plan: Plan, real: Collection[str] = ()) -> GpuplexSpec:
    """The spec with stand-ins for its commands but those of `real` (`tenant/workload`), run by
    an interpreter the tenants' users can run (host/interpreter.py): what `host apply
    --stand-ins`, `make host-demo` and `gpuplex up` without a GPU run. A
    host.session.SpecTransform once `real` is bound: the plan is the applied one, not made
    here."""
    python, env = python_for_others() if os.geteuid() == 0 else (sys.executable, {})
    return simulated_spec(spec, plan, python, env, real)


def stand_ins_but(real: Collection[str]) -> Callable[[GpuplexSpec, Plan], GpuplexSpec]:
    """The SpecTransform of `--stand-ins` with `--real` workloads."""
    return functools.partial(with_stand_ins, real=frozenset(real))


def runs_for_real(spec: GpuplexSpec, real: Collection[str] | None) -> tuple[list[str], list[str]]:
    """(the workloads that run their own command, those that run a stand-in), as
    `tenant/workload`, on simulated GPUs; `real` None: every command runs for real. Workloads
    without a command (LoRA adapters riding on another's server) are in neither."""
    own: list[str] = []
    stand_ins: list[str] = []
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.command is None:
                continue
            name = f"{tenant.name}/{workload.name}"
            (own if real is None or name in real else stand_ins).append(name)
    return own, stand_ins


def unknown_real(spec: GpuplexSpec, real: Collection[str]) -> list[str]:
    """The names in `real` that are no workload with a command in `spec`, each with why."""
    commands = {
        f"{t.name}/{w.name}": w.command is not None for t in spec.tenants for w in t.workloads
    }
    problems = []
    for name in real:
        if name not in commands:
            known = ", ".join(sorted(n for n, has in commands.items() if has)) or "none"
            problems.append(f"{name} is no workload of the spec (with a command: {known})")
        elif not commands[name]:
            problems.append(f"{name} has no command to run (a LoRA adapter rides on its base)")
    return problems
