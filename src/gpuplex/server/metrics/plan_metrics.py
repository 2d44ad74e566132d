"""Metric families of what is placed and held now: per tenant from the applied plan (GPUs, MIG
slices, shares, memory) and from the newest GPU samples (memory used, utilization), and per GPU.

Per-GPU series are `gpuplex_gpu_*` with snake_case labels (`node`, `gpu`, `uuid`, `gpu_model`), not
dcgm-exporter's names: gpuplex's numbers are sums over the tenants' processes on a GPU, not the
device-wide values DCGM reads (`DCGM_FI_DEV_FB_USED` also counts the driver's and other processes'
memory; `DCGM_FI_DEV_GPU_UTIL` is device busy time), and one name meaning two things in one
Prometheus breaks every `sum()` over it. DCGM's camelCase labels (`Hostname`, `UUID`, `modelName`)
fail `promtool check metrics`; join with DCGM's series through `label_replace` (docs/operations.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from gpuplex.core.meter import gpu_share
from gpuplex.core.plan import Plan
from gpuplex.server.metrics.tenant_labels import TenantLabels
from gpuplex.store.metric_queries import HeldSample

GPU_LABELS = ("node", "gpu", "uuid", "gpu_model")
#: Label values -> the series' value.
Values = dict[tuple[str, ...], float]
MAX_PERCENT = 100.0


def tenant_allocation(plan: Plan, labels: TenantLabels) -> Iterator[Metric]:
    gpus: dict[str, float] = {name: 0.0 for name in labels.own}
    memory_mib: dict[str, float] = {name: 0.0 for name in labels.own}
    replicas: Values = defaultdict(float)
    slices: Values = defaultdict(float)
    for placement in plan.placements:
        tenant = labels.tenant(placement.tenant)
        gpus[tenant] = gpus.get(tenant, 0.0) + float(gpu_share(placement, plan))
        memory_mib[tenant] = memory_mib.get(tenant, 0.0) + placement.memory_mib
        replicas[tenant, placement.mode.value] += 1
        if placement.mig is not None:
            slices[tenant, placement.mig.profile] += 1
    unplaced: Values = {(name,): 0.0 for name in labels.own}
    for infeasible in plan.infeasible:
        key = (labels.tenant(infeasible.tenant),)
        unplaced[key] = unplaced.get(key, 0.0) + 1
    yield gauge_family(
        "gpuplex_tenant_allocated_gpus",
        "GPUs the applied plan gives the tenant: a whole GPU counts 1, a MIG slice or MPS share "
        "its compute fraction.",
        ["tenant"],
        {(t,): v for t, v in gpus.items()},
    )
    yield gauge_family(
        "gpuplex_tenant_allocated_gpu_memory_mib",
        "GPU memory the applied plan lets the tenant's replicas hold, in MiB.",
        ["tenant"],
        {(t,): v for t, v in memory_mib.items()},
    )
    yield gauge_family(
        "gpuplex_tenant_placed_replicas",
        "Replicas placed by the applied plan, by isolation mode (dedicated, mig, mps, timeslice).",
        ["tenant", "mode"],
        dict(replicas),
    )
    yield gauge_family(
        "gpuplex_tenant_mig_slices",
        "MIG slices the applied plan gives the tenant, by MIG profile.",
        ["tenant", "profile"],
        dict(slices),
    )
    yield gauge_family(
        "gpuplex_tenant_unplaced_replicas",
        "Replicas the applied plan could not place (see `gpuplex explain`).",
        ["tenant"],
        unplaced,
    )


def tenant_held(samples: Sequence[HeldSample], labels: TenantLabels) -> Iterator[Metric]:
    memory_mib: Values = defaultdict(float)
    utilization: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for sample in samples:
        tenant = (labels.tenant(sample.tenant),)
        memory_mib[tenant] += sample.memory_used_mib
        if sample.utilization_percent is not None:
            utilization[tenant].append(sample.utilization_percent)
    yield gauge_family(
        "gpuplex_tenant_gpu_memory_used_mib",
        "GPU memory the tenant's processes hold, in MiB, from each replica's newest GPU sample.",
        ["tenant"],
        dict(memory_mib),
    )
    yield gauge_family(
        "gpuplex_tenant_gpu_utilization_percent",
        "Mean GPU utilization of the tenant's replicas, in percent, from their newest samples "
        "(replicas whose sampler cannot attribute it, such as MIG slices, are left out).",
        ["tenant"],
        {key: sum(values) / len(values) for key, values in utilization.items()},
    )


def per_gpu(plan: Plan, samples: Sequence[HeldSample]) -> Iterator[Metric]:
    used: dict[tuple[str, int], float] = defaultdict(float)
    busy: dict[tuple[str, int], list[float]] = defaultdict(list)
    uuids: dict[tuple[str, int], str] = {}
    for sample in samples:
        where = (sample.node, sample.gpu_index)
        used[where] += sample.memory_used_mib
        if sample.utilization_percent is not None:
            busy[where].append(sample.utilization_percent)
        if sample.gpu_uuid:
            uuids[where] = sample.gpu_uuid
    info: Values = {}
    total: Values = {}
    allocated: Values = {}
    occupants: Values = {}
    memory_used: Values = {}
    utilization: Values = {}
    for gpu in plan.gpus:
        where = (gpu.node, gpu.index)
        key = (gpu.node, str(gpu.index), gpu.uuid or uuids.get(where, ""), gpu.model)
        info[(*key, gpu.mode.value if gpu.mode is not None else "idle", gpu.pool or "")] = 1
        total[key] = gpu.memory_mib
        allocated[key] = sum(o.memory_mib for o in gpu.occupants)
        occupants[key] = len(gpu.occupants)
        if where in used:
            memory_used[key] = used[where]
        if busy.get(where):
            utilization[key] = min(MAX_PERCENT, sum(busy[where]))
    yield gauge_family(
        "gpuplex_gpu_info",
        "One series per GPU of the applied plan, always 1: its isolation mode (idle when nothing "
        "is placed on it) and pool.",
        [*GPU_LABELS, "mode", "pool"],
        info,
    )
    yield gauge_family(
        "gpuplex_gpu_memory_total_mib",
        "The GPU's memory, in MiB, as the catalog knows it.",
        GPU_LABELS,
        total,
    )
    yield gauge_family(
        "gpuplex_gpu_allocated_memory_mib",
        "GPU memory the applied plan gives to replicas on this GPU, in MiB.",
        GPU_LABELS,
        allocated,
    )
    yield gauge_family(
        "gpuplex_gpu_occupants",
        "Replicas the applied plan puts on this GPU.",
        GPU_LABELS,
        occupants,
    )
    yield gauge_family(
        "gpuplex_gpu_memory_used_mib",
        "GPU memory the tenants' processes hold on this GPU, in MiB, from the newest samples "
        "(not the device-wide DCGM_FI_DEV_FB_USED).",
        GPU_LABELS,
        memory_used,
    )
    yield gauge_family(
        "gpuplex_gpu_utilization_percent",
        "Sum of the tenants' replicas' utilization on this GPU, in percent (at most 100), from the "
        "newest samples that report it.",
        GPU_LABELS,
        utilization,
    )


def gauge_family(
    name: str,
    documentation: str,
    label_names: Sequence[str],
    values: Values,
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=list(label_names))
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family
