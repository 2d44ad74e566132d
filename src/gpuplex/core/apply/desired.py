"""From a spec and its plan to what one server should run: the desired host."""

from __future__ import annotations

from collections import Counter

from gpuplex.core.apply.model import Binding, DesiredHost, GpuDesired, WorkloadDesired
from gpuplex.core.plan.model import Mode, Placement, Plan
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobWorkloadSpec
from gpuplex.core.spec.runtime import Network, Runtime
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.core.spec.workloads import WorkloadSpec


def desired_host(spec: GpuplexSpec, plan: Plan, node: str) -> DesiredHost:
    """The replicas the plan puts on `node`, with commands filled in, and the GPUs' MIG and MPS needs."""
    tenants = {tenant.name: tenant for tenant in spec.tenants}
    workloads: list[WorkloadDesired] = []
    notes: list[str] = []
    for placement in plan.placements:
        if placement.node != node:
            continue
        tenant = tenants.get(placement.tenant)
        workload = next(
            (w for w in tenant.workloads if w.name == placement.workload) if tenant else iter(()),
            None,
        )
        if tenant is None or workload is None:
            notes.append(f"{placement.label()}: not in the spec any more")
            continue
        wanted = _replica(spec, tenant, workload, placement)
        if wanted is None:
            notes.append(f"{placement.label()}: no command to run (give command, or image)")
            continue
        workloads.append(wanted)
    gpus = [
        GpuDesired(
            index=view.index,
            model=view.model,
            mig_slices=[o.mig for o in view.occupants if o.mig is not None]
            if view.mode is Mode.MIG
            else None,
            mps=view.mode is Mode.MPS,
        )
        for view in plan.gpus
        if view.node == node
    ]
    return DesiredHost(node=node, gpus=gpus, workloads=workloads, settings=spec.host, notes=notes)


def _replica(
    spec: GpuplexSpec, tenant: TenantSpec, workload: WorkloadSpec, placement: Placement
) -> WorkloadDesired | None:
    containerised = spec.host.runtime is not Runtime.PROCESS and workload.image is not None
    if workload.command is None and not containerised:
        return None
    replica = placement.replica
    job = isinstance(workload, JobWorkloadSpec)
    port = workload.serve.port + replica if workload.serve is not None else None
    health_port = port
    if workload.health is not None and workload.health.port is not None:
        health_port = workload.health.port + replica
    fill = {
        "{port}": str(port) if port is not None else "",
        "{replica}": str(replica),
        "{memory_mib}": str(placement.memory_mib),
        "{thread_percent}": str(placement.thread_percent or 100),
    }
    return WorkloadDesired(
        tenant=tenant.name,
        workload=workload.name,
        replica=replica,
        binding=Binding(
            mode=placement.mode,
            gpu_indices=placement.gpu_indices,
            mig=placement.mig,
            memory_mib=placement.memory_mib,
            thread_percent=placement.thread_percent,
        ),
        argv=[_fill(arg, fill) for arg in workload.command or []],
        runtime=spec.host.runtime if containerised else Runtime.PROCESS,
        image=workload.image if containerised else None,
        env={name: _fill(value, fill) for name, value in workload.env.items()},
        port=port,
        health=workload.health,
        health_port=health_port if workload.health is not None else None,
        limits=workload.limits,
        restart=workload.restart,
        network=Network.NONE if job else workload.network,
        unix_user=tenant.unix_user,
        reads=[] if job else list(workload.reads),
        job=job,
    )


def _fill(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def port_clashes(host: DesiredHost) -> list[str]:
    """Ports two replicas on this host would both listen on (serve.port + replica index)."""
    users: dict[int, list[str]] = {}
    for wanted in host.workloads:
        for port in {p for p in (wanted.port, wanted.health_port) if p is not None}:
            users.setdefault(port, []).append(wanted.label)
    counts = Counter({port: len(labels) for port, labels in users.items()})
    return [
        f"port {port} is used by {', '.join(users[port])}: give each workload its own serve.port "
        "range (replica r listens on port + r)"
        for port, count in sorted(counts.items())
        if count > 1
    ]


def fleet_port_clashes(spec: GpuplexSpec, plan: Plan) -> list[str]:
    """`port_clashes` on every node of the fleet: what `host apply` on that node would refuse,
    said ahead by `validate` and `plan`."""
    return [
        f"on node {node.name}: {clash}"
        for node in spec.fleet.nodes
        for clash in port_clashes(desired_host(spec, plan, node.name))
    ]
