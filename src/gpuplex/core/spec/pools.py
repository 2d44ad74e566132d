"""Which GPUs a workload may use. One rule, shared by validation and the planner:

A workload runs on GPUs of its pool. Its pool is `pool:` when given, else the name of its pattern
(`long-running`, `bursty`) when some GPU is in a pool of that name. GPUs in no pool take any workload.
"""

from __future__ import annotations

from gpuplex.core.spec.fleet import FleetSpec, GpuGroupSpec, NodeSpec
from gpuplex.core.spec.workloads import WorkloadSpec


def gpu_pool(node: NodeSpec, group: GpuGroupSpec) -> str | None:
    return group.pool if group.pool is not None else node.pool


def fleet_pools(fleet: FleetSpec) -> set[str]:
    return {
        pool
        for node in fleet.nodes
        for group in node.gpus
        if (pool := gpu_pool(node, group)) is not None
    }


def workload_pool(pools: set[str], workload: WorkloadSpec) -> str | None:
    if workload.pool is not None:
        return workload.pool
    return workload.pattern.value if workload.pattern.value in pools else None


def pool_accepts(gpu_pool_name: str | None, wanted_pool: str | None) -> bool:
    return gpu_pool_name is None or gpu_pool_name == wanted_pool
