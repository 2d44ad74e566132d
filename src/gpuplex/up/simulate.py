"""The spec the host runtime runs when there is no GPU: the same tenants, workloads and placement,
with each command replaced by a stand-in that holds simulated GPU memory — the simulated
OpenAI-compatible model server for served models (with the LoRA adapters riding on it), the
simulated workload for batch and training jobs. A stand-in reads none of the folders granted to the
command it replaces (`reads`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

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
) -> GpuplexSpec:
    """`python` (with `python_env` added to each stand-in's environment) must be runnable by the
    tenants' users: see host/interpreter.py."""
    adapters = _adapters_by_base(spec)
    tenants = []
    for tenant in spec.tenants:
        workloads = []
        for workload in tenant.workloads:
            if workload.command is None:
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


def with_stand_ins(spec: GpuplexSpec, plan: Plan) -> GpuplexSpec:
    """The spec with stand-ins for its commands, run by an interpreter the tenants' users can
    run (host/interpreter.py): what `host apply --stand-ins`, `make host-demo` and `gpuplex up`
    without a GPU run. A host.session.SpecTransform: the plan is the applied one, not made here."""
    python, env = python_for_others() if os.geteuid() == 0 else (sys.executable, {})
    return simulated_spec(spec, plan, python, env)
