"""GPU readings of dcgm-exporter -> GPU samples of tenant replicas, for metering on Kubernetes.

`gpuplex.observe.dcgm` reads each exporter's text into readings (one per GPU or MIG instance and
pod); `attribute` turns the readings of all exporters, read at one moment, into the store's samples:
tenant from the namespace (`kubernetes.namespace_prefix` + tenant, the Kubernetes target's naming),
workload from the pod's name. Series that belong to no tenant replica are skipped and counted by
reason.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpuplex.core.meter import GpuSample
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import tenant_of_namespace
from gpuplex.observe.dcgm import DcgmReading, utilization_percent

SkipReason = Literal["no_node", "no_pod", "not_tenant_namespace", "unknown_workload"]
SKIP_REASONS: tuple[SkipReason, ...] = (
    "no_node",
    "no_pod",
    "not_tenant_namespace",
    "unknown_workload",
)
_EXAMPLES_PER_REASON = 3


@dataclass(frozen=True, slots=True)
class Attribution:
    """The samples of one scrape, and what was left out: readings per reason, with a few
    `namespace/pod` examples each for the log."""

    samples: list[GpuSample]
    skipped: Mapping[SkipReason, int] = field(default_factory=dict)
    examples: Mapping[SkipReason, list[str]] = field(default_factory=dict)


def workload_of_pod(pod: str, workloads: Iterable[str]) -> str | None:
    """The workload a pod belongs to: the longest workload name that, followed by `-`, begins the
    pod's name (`chat-7c9f8b6d5-x2x9q` -> `chat`, even beside a workload `chat-large`)."""
    matches = [name for name in workloads if pod.startswith(f"{name}-")]
    return max(matches, key=len) if matches else None


def attribute(readings: Sequence[DcgmReading], spec: GpuplexSpec, at: datetime) -> Attribution:
    """The readings of every exporter, read at `at`, as one sample per tenant replica per GPU.

    Tenant from the namespace (`kubernetes.namespace_prefix` + tenant), workload from the pod's
    name, replica = the pod's place among its workload's pods sorted by name. A pod's MIG instances
    on one GPU add up (memory and busy share)."""
    workloads = {
        tenant.name: [w.name for w in tenant.workloads if w.serve is None or not w.serve.lora_of]
        for tenant in spec.tenants
    }
    skipped: Counter[SkipReason] = Counter()
    examples: dict[SkipReason, list[str]] = defaultdict(list)
    held: dict[tuple[str, str, str, str, int], list[DcgmReading]] = defaultdict(list)
    for reading in readings:
        owner = _owner(reading, spec, workloads)
        if isinstance(owner, str):
            skipped[owner] += 1
            if reading.pod and len(examples[owner]) < _EXAMPLES_PER_REASON:
                examples[owner].append(f"{reading.namespace}/{reading.pod}")
            continue
        tenant, workload = owner
        held[tenant, workload, reading.pod, reading.node, reading.gpu_index].append(reading)
    pods: dict[tuple[str, str], set[str]] = defaultdict(set)
    for tenant, workload, pod, _, _ in held:
        pods[tenant, workload].add(pod)
    replica_of = {
        (tenant, workload, pod): index
        for (tenant, workload), names in pods.items()
        for index, pod in enumerate(sorted(names))
    }
    samples = [_sample(at, key, replica_of[key[:3]], parts) for key, parts in sorted(held.items())]
    return Attribution(samples, dict(skipped), dict(examples))


def _owner(
    reading: DcgmReading, spec: GpuplexSpec, workloads: Mapping[str, list[str]]
) -> tuple[str, str] | SkipReason:
    """(tenant, workload) of the pod that holds the reading's device, or why there is none."""
    if not reading.node:
        return "no_node"
    if not reading.pod or not reading.namespace:
        return "no_pod"
    tenant = tenant_of_namespace(spec, reading.namespace)
    if tenant is None:
        return "not_tenant_namespace"
    workload = workload_of_pod(reading.pod, workloads[tenant])
    if workload is None:
        return "unknown_workload"
    return tenant, workload


def _sample(
    at: datetime,
    key: tuple[str, str, str, str, int],
    replica: int,
    parts: list[DcgmReading],
) -> GpuSample:
    tenant, workload, _, node, gpu_index = key
    busy = [u for u in map(utilization_percent, parts) if u is not None]
    memory = sum(p.memory_used_mib or 0.0 for p in parts)
    return GpuSample(
        at=at,
        node=node,
        gpu_index=gpu_index,
        tenant=tenant,
        workload=workload,
        replica=replica,
        memory_used_mib=round(memory),
        utilization_percent=min(sum(busy), 100.0) if busy else None,
        source="dcgm",
        gpu_uuid=next((p.gpu_uuid for p in parts if p.gpu_uuid), None),
    )
