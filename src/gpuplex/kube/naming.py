"""Names, labels and GPU resource names every rendered object shares. One place, so that the quota,
the admission policy, the workloads and the metering (DCGM namespace -> tenant) agree.

A manifest is a plain JSON-able dict, exactly what `kubectl apply -f` would read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuplex.core.plan import Mode, Placement, Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError

Manifest = dict[str, Any]

# Labels on every object gpuplex renders; `apply` prunes by them.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpuplex"
#: Which rendered set an object belongs to: `plan` (tenants, cluster config, workloads) or
#: `self` (gpuplex's own server and gateway). Pruning never crosses sets.
SET_LABEL = "gpuplex.dev/set"
PLAN_SET = "plan"
SELF_SET = "self"
TENANT_LABEL = "gpuplex.dev/tenant"
WORKLOAD_LABEL = "gpuplex.dev/workload"
#: On pods of workloads that serve a model: the gateway may reach them (NetworkPolicy).
SERVES_LABEL = "gpuplex.dev/serves"
COMPONENT_LABEL = "app.kubernetes.io/component"
NAME_LABEL = "app.kubernetes.io/name"
#: `app.kubernetes.io/name` of the gateway's pods: tenant NetworkPolicies let in only these.
GATEWAY_APP_NAME = "gpuplex-gateway"

#: Node label per pool a node serves: `pool.gpuplex.dev/<pool>: "true"`; a node can serve several.
POOL_LABEL_PREFIX = "pool.gpuplex.dev/"
#: Taint on every pooled node, value = the node's own pool; gpuplex pods tolerate the key.
POOL_TAINT_KEY = "gpuplex.dev/pool"

# NVIDIA device plugin / GPU feature discovery / MIG manager (gpu-sharing-facts.md §2-§3).
GPU_RESOURCE = "nvidia.com/gpu"
#: Shared replicas (MPS or time-slicing) are advertised under this name (`renameByDefault: true`),
#: so a quota and the admission policy can tell a whole GPU from a share.
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARING_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # none | mps | time-slicing
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"

#: Kubernetes version the rendered objects target and are validated against (oldest with
#: ValidatingAdmissionPolicy v1).
MIN_KUBERNETES = "1.30"


def namespace_for(spec: GpuplexSpec, tenant: str) -> str:
    """The tenant's namespace: `kubernetes.namespace_prefix` + tenant name."""
    name = spec.kubernetes.namespace_prefix + tenant
    if len(name) > 63:
        raise KubeRenderError(
            f"tenant {tenant}: namespace {name!r} is {len(name)} characters, over Kubernetes' 63: "
            "shorten kubernetes.namespace_prefix or the tenant name"
        )
    return name


def tenant_of_namespace(spec: GpuplexSpec, namespace: str) -> str | None:
    """The tenant whose namespace this is, or None (not a tenant namespace)."""
    for tenant in spec.tenants:
        if spec.kubernetes.namespace_prefix + tenant.name == namespace:
            return tenant.name
    return None


def labels(
    *, set_name: str = PLAN_SET, tenant: str | None = None, workload: str | None = None
) -> dict[str, str]:
    out = {MANAGED_BY_LABEL: MANAGED_BY, SET_LABEL: set_name}
    if tenant is not None:
        out[TENANT_LABEL] = tenant
    if workload is not None:
        out[WORKLOAD_LABEL] = workload
    return out


def metadata(
    name: str,
    *,
    namespace: str | None = None,
    set_name: str = PLAN_SET,
    tenant: str | None = None,
    workload: str | None = None,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`metadata` of a rendered object, with gpuplex's ownership labels."""
    out: dict[str, Any] = {"name": name}
    if namespace is not None:
        out["namespace"] = namespace
    out["labels"] = {
        **labels(set_name=set_name, tenant=tenant, workload=workload),
        **(extra_labels or {}),
    }
    if annotations:
        out["annotations"] = dict(annotations)
    return out


def mig_resource(profile: str) -> str:
    """`nvidia.com/mig-<profile>` with `+` written `.` (mixed strategy, k8s-device-plugin rm.go)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def gpu_request(placement: Placement) -> tuple[str, int]:
    """The extended resource and count one planned replica asks Kubernetes for."""
    if placement.mode is Mode.DEDICATED:
        return GPU_RESOURCE, len(placement.gpu_indices)
    if placement.mode is Mode.MIG:
        if placement.mig is None:
            raise KubeRenderError(f"{placement.label()}: planned as MIG but the plan has no slice")
        return mig_resource(placement.mig.profile), 1
    return SHARED_GPU_RESOURCE, 1


def tenant_gpu_requests(plan: Plan, tenant: str) -> dict[str, int]:
    """Resource name -> how many the plan gives `tenant`: what its ResourceQuota allows."""
    totals: Counter[str] = Counter()
    for placement in plan.placements:
        if placement.tenant == tenant:
            resource, count = gpu_request(placement)
            totals[resource] += count
    return dict(sorted(totals.items()))


def priority_class_name(priority: int) -> str:
    """One PriorityClass per distinct tenant priority: gpuplex-priority-100, -minus-100."""
    return (
        f"gpuplex-priority-{priority}" if priority >= 0 else f"gpuplex-priority-minus-{-priority}"
    )


#: The PriorityClass of queued Jobs' pods: value 0, below every tenant's class (so the scheduler
#: never evicts a planned replica for a queued job), and Kueue's priority of a Job without the
#: `kueue.x-k8s.io/priority-class` label, which is `gpuplex-normal`'s, as on one server. Its own
#: ResourceQuota in each tenant namespace holds what the tenant's Kueue queue may admit.
QUEUED_PRIORITY_CLASS = "gpuplex-queued"
QUEUED_PRIORITY_VALUE = 0


def priority_class_value(priority: int) -> int:
    """Kubernetes priority of a tenant priority: kept well below system classes (2e9) and above
    the default 0 for every tenant, in the same order as the spec's priorities."""
    return 100_000 + priority


def service_name(workload: str) -> str:
    """The Service in the tenant's namespace that fronts a served workload's pods."""
    return workload


def service_url(spec: GpuplexSpec, tenant: str, workload: str, port: int) -> str:
    return f"http://{service_name(workload)}.{namespace_for(spec, tenant)}.svc.cluster.local:{port}"


def kubernetes_backends(spec: GpuplexSpec) -> dict[str, list[str]]:
    """`gateway.backends` for a gateway running in the cluster: every served workload that has its
    own server (not a LoRA adapter on another's) is reached through its Service."""
    backends: dict[str, list[str]] = {}
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.serve is None or workload.serve.lora_of:
                continue
            url = service_url(spec, tenant.name, workload.name, workload.serve.port)
            backends[f"{tenant.name}/{workload.name}"] = [url]
    return backends
