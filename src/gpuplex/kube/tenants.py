"""One namespace per tenant, fenced in: the namespace itself, a ResourceQuota that holds the tenant to
the GPUs the plan gives it, LimitRange defaults (so the CPU and memory quota never rejects a pod that
names no CPU or memory), RBAC for the tenant's groups and NetworkPolicies.

The quota is what makes the plan binding on Kubernetes: the scheduler hands out GPUs to whoever asks
first, so without a hard limit per namespace a tenant could take another tenant's planned GPUs.
"""

from __future__ import annotations

import math

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.kubernetes import NamespaceQuotaSpec
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import (
    GPU_RESOURCE,
    QUEUED_PRIORITY_CLASS,
    SHARED_GPU_RESOURCE,
    Manifest,
    gpu_request,
    metadata,
    namespace_for,
    priority_class_name,
    tenant_gpu_requests,
)
from gpuplex.kube.network import network_policies
from gpuplex.kube.rbac import rbac_manifests

QUOTA_NAME = "gpuplex-quota"
#: With Kueue: what the tenant's queue may admit, counted over the pods of queued Jobs only.
QUEUED_QUOTA_NAME = "gpuplex-queued-quota"
#: With Kueue: PVCs and storage (a quota scoped to a priority class counts pod resources only).
STORAGE_QUOTA_NAME = "gpuplex-storage-quota"
LIMIT_RANGE_NAME = "gpuplex-defaults"

#: Pod Security: `baseline` is enforced (GPU pods need nothing `restricted` forbids, but operators'
#: images often run as root); `restricted` only warns and audits, so tenants see what to tighten.
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}

#: Namespaces that belong to the cluster itself; a tenant namespace must never be one of them.
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})

#: Container defaults where a workload names no CPU or memory (spec `limits:`), capped by the
#: namespace quota so a default never exceeds what the namespace may hold.
DEFAULT_REQUEST_MILLICORES = 500
DEFAULT_REQUEST_MIB = 1024
DEFAULT_LIMIT_CORES = 2
DEFAULT_LIMIT_GIB = 8


def tenant_manifests(
    spec: GpuplexSpec, plan: Plan, queued: dict[str, dict[str, int]] | None = None
) -> list[Manifest]:
    """Per tenant, in spec order: Namespace, ResourceQuota(s), LimitRange, Roles and
    RoleBindings, NetworkPolicies. Every tenant gets a namespace, even one the plan places nothing
    for, so its quota (zero GPUs) and RBAC exist before its first workload does.

    `queued` (tenant -> Kueue resource -> the most its queue may admit; None without Kueue)
    splits the quota in two by priority class: `gpuplex-quota` holds the tenant's own pods to the
    plan, `gpuplex-queued-quota` holds queued Jobs' pods to what Kueue may admit, so that every
    pod of an admitted Job fits and nothing else can use the queue's share."""
    check_namespaces(spec)
    gpu_resources = sorted(
        {*plan_gpu_resources(plan), *(r for q in (queued or {}).values() for r in q)}
    )
    manifests: list[Manifest] = []
    for tenant in spec.tenants:
        namespace = namespace_for(spec, tenant.name)
        quota = namespace_quota(spec, tenant)
        check_pods_fit_quota(spec, plan, tenant, quota)
        manifests.append(namespace_manifest(namespace, tenant.name))
        if queued is None:
            manifests.append(resource_quota(plan, namespace, tenant.name, gpu_resources, quota))
        else:
            manifests += queued_quotas(
                spec, plan, tenant, gpu_resources, quota, queued.get(tenant.name, {})
            )
        manifests.append(limit_range(namespace, tenant.name, quota))
        manifests.extend(rbac_manifests(spec, namespace, tenant.name))
        manifests.extend(network_policies(spec, namespace, tenant))
    return manifests


def check_namespaces(spec: GpuplexSpec) -> None:
    """A tenant namespace that is a system namespace, or another tenant's, would hand the tenant's
    quota and RBAC to something else: refuse instead."""
    kube = spec.kubernetes
    owners: dict[str, str] = {}
    for tenant in spec.tenants:
        namespace = namespace_for(spec, tenant.name)
        clash = None
        if namespace in RESERVED_NAMESPACES or namespace.startswith("kube-"):
            clash = "a Kubernetes system namespace"
        elif namespace == kube.system_namespace:
            clash = "gpuplex's own namespace (kubernetes.system_namespace)"
        elif namespace == kube.gpu_operator_namespace:
            clash = "the GPU operator's namespace (kubernetes.gpu_operator_namespace)"
        elif namespace in owners:
            clash = f"tenant {owners[namespace]}'s namespace"
        if clash is not None:
            raise KubeRenderError(
                f"tenant {tenant.name}: its namespace {namespace!r} is {clash}: set "
                "kubernetes.namespace_prefix (e.g. 'tenant-') or rename the tenant"
            )
        owners[namespace] = tenant.name


def plan_gpu_resources(plan: Plan) -> list[str]:
    """Every GPU resource name the plan uses, plus whole and shared GPUs: each quota lists them all,
    most at zero, so a tenant cannot take a kind of GPU the plan never gave it."""
    names = {GPU_RESOURCE, SHARED_GPU_RESOURCE}
    names.update(gpu_request(placement)[0] for placement in plan.placements)
    return sorted(names)


def namespace_quota(spec: GpuplexSpec, tenant: TenantSpec) -> NamespaceQuotaSpec:
    return tenant.namespace_quota or spec.kubernetes.namespace_quota


def namespace_manifest(namespace: str, tenant: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(namespace, tenant=tenant, extra_labels=POD_SECURITY_LABELS),
    }


def resource_quota(
    plan: Plan, namespace: str, tenant: str, gpu_resources: list[str], quota: NamespaceQuotaSpec
) -> Manifest:
    """GPU hard limits equal to the plan's allocation (extended resources take only `requests.`
    quotas, and a pod's GPU request always equals its limit), plus CPU, memory and storage."""
    granted = tenant_gpu_requests(plan, tenant)
    hard = {f"requests.{name}": str(granted.get(name, 0)) for name in gpu_resources}
    hard.update(
        {
            "requests.cpu": str(quota.cpu_cores),
            "limits.cpu": str(quota.cpu_cores),
            "requests.memory": f"{quota.memory_gib}Gi",
            "limits.memory": f"{quota.memory_gib}Gi",
            "persistentvolumeclaims": str(quota.pvcs),
            "requests.storage": f"{quota.storage_gib}Gi",
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata(QUOTA_NAME, namespace=namespace, tenant=tenant),
        "spec": {"hard": hard},
    }


def queued_quotas(
    spec: GpuplexSpec,
    plan: Plan,
    tenant: TenantSpec,
    gpu_resources: list[str],
    quota: NamespaceQuotaSpec,
    most: dict[str, int],
) -> list[Manifest]:
    """With Kueue, three quotas: the tenant's own pods (its priority class) to the plan's GPUs and
    the namespace's CPU and memory; queued Jobs' pods (`gpuplex-queued`) to what the tenant's
    ClusterQueue may admit, GPUs and CPU and memory alike (its cpu and memory nominal quota is
    the namespace's); storage, which no pod scope counts. A pod of neither class is refused by
    the admission policy, so every pod counts against exactly one."""
    namespace = namespace_for(spec, tenant.name)
    own = resource_quota(plan, namespace, tenant.name, gpu_resources, quota)
    hard = own["spec"]["hard"]
    storage = {key: hard.pop(key) for key in ("persistentvolumeclaims", "requests.storage")}
    own["spec"]["scopeSelector"] = _priority_scope(priority_class_name(tenant.priority))
    queued_hard = {f"requests.{name}": str(most.get(name, 0)) for name in gpu_resources}
    queued_hard.update({key: value for key, value in hard.items() if "nvidia.com" not in key})
    return [
        own,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": metadata(QUEUED_QUOTA_NAME, namespace=namespace, tenant=tenant.name),
            "spec": {"hard": queued_hard, "scopeSelector": _priority_scope(QUEUED_PRIORITY_CLASS)},
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": metadata(STORAGE_QUOTA_NAME, namespace=namespace, tenant=tenant.name),
            "spec": {"hard": storage},
        },
    ]


def _priority_scope(priority_class: str) -> dict[str, object]:
    return {
        "matchExpressions": [
            {"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}
        ]
    }


def default_limit_cores(quota: NamespaceQuotaSpec) -> int:
    return min(DEFAULT_LIMIT_CORES, quota.cpu_cores)


def default_limit_gib(quota: NamespaceQuotaSpec) -> int:
    return min(DEFAULT_LIMIT_GIB, quota.memory_gib)


def limit_range(namespace: str, tenant: str, quota: NamespaceQuotaSpec) -> Manifest:
    """With a CPU and memory quota, Kubernetes rejects any pod that states no CPU or memory; these
    defaults fill them in for containers that do not."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": metadata(LIMIT_RANGE_NAME, namespace=namespace, tenant=tenant),
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "defaultRequest": {
                        "cpu": f"{DEFAULT_REQUEST_MILLICORES}m",
                        "memory": f"{DEFAULT_REQUEST_MIB}Mi",
                    },
                    "default": {
                        "cpu": str(default_limit_cores(quota)),
                        "memory": f"{default_limit_gib(quota)}Gi",
                    },
                }
            ]
        },
    }


def check_pods_fit_quota(
    spec: GpuplexSpec, plan: Plan, tenant: TenantSpec, quota: NamespaceQuotaSpec
) -> None:
    """The planned pods, at their CPU and memory limits (the workload's `limits:` or the LimitRange
    default), must fit the namespace quota; otherwise Kubernetes would refuse some of them long after
    `apply` reported success. Counts steady state: a rolling update's extra pod needs headroom."""
    placed: dict[str, int] = {}
    for placement in plan.placements:
        if placement.tenant == tenant.name:
            placed[placement.workload] = placed.get(placement.workload, 0) + 1
    cores = 0.0
    gib = 0.0
    for workload in tenant.workloads:
        pods = placed.get(workload.name, 0)
        cores += pods * (workload.limits.cpu_cores or default_limit_cores(quota))
        gib += pods * (workload.limits.memory_gib or default_limit_gib(quota))
    pods_total = sum(placed.values())
    over = []
    if cores > quota.cpu_cores:
        over.append(f"{_amount(cores)} CPU cores (namespace quota {quota.cpu_cores})")
    if gib > quota.memory_gib:
        over.append(f"{_amount(gib)} GiB of memory (namespace quota {quota.memory_gib})")
    if over:
        where = (
            f"tenants.{tenant.name}.namespace_quota"
            if tenant.namespace_quota is not None
            else f"kubernetes.namespace_quota (or tenants.{tenant.name}.namespace_quota)"
        )
        raise KubeRenderError(
            f"tenant {tenant.name}: its {pods_total} planned pods are limited to "
            f"{' and '.join(over)}, so Kubernetes would refuse some of them: raise {where}, or "
            "set smaller cpu_cores/memory_gib under the workloads' limits"
        )


def _amount(value: float) -> str:
    """2.0 -> '2', 2.5 -> '2.5': numbers in messages as a person would write them."""
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:g}"
