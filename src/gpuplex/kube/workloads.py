"""The tenants' workloads as Kubernetes objects: a Deployment for each server (inference, notebook),
a Job for each run-to-completion workload (batch, training), and a Service for each served model.

Only what the plan placed is rendered: a workload with no placed replica renders nothing, and the
replica count is the number the plan placed, never more, because the namespace's ResourceQuota
holds exactly the planned GPUs and an extra pod would only wait for a GPU it can never get.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuplex.core.plan import Mode, Placement, Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.pools import fleet_pools, workload_pool
from gpuplex.core.spec.runtime import RestartPolicy
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.core.spec.workloads import ServeSpec, WorkloadKind, WorkloadSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import (
    SERVES_LABEL,
    TENANT_LABEL,
    WORKLOAD_LABEL,
    Manifest,
    gpu_request,
    metadata,
    namespace_for,
    priority_class_name,
    service_name,
)
from gpuplex.kube.pods import HTTP_PORT_NAME, GpuShare, pod_template

#: Tells apart the Deployments or Jobs of one workload whose replicas got different GPUs, so each
#: object's selector matches its own pods only (overlapping Deployment selectors fight).
INSTANCE_LABEL = "app.kubernetes.io/instance"
SERVER_KINDS = frozenset({WorkloadKind.INFERENCE, WorkloadKind.NOTEBOOK})
MAX_NAME = 63  # a Job's name becomes the `job-name` label value on its pods


def workload_manifests(spec: GpuplexSpec, plan: Plan) -> list[Manifest]:
    """Per tenant and workload, in spec order: its Deployments or Jobs (one per distinct GPU share
    the plan gave its replicas), then its Service when it serves a model. LoRA adapters render
    nothing: they are loaded by their base model's server and ride its pods."""
    pools = fleet_pools(spec.fleet)
    manifests: list[Manifest] = []
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.serve is not None and workload.serve.lora_of:
                continue
            placed = [
                p
                for p in plan.placements
                if p.tenant == tenant.name and p.workload == workload.name
            ]
            if not placed:
                continue
            pool = workload_pool(pools, workload)
            groups = share_groups(placed, workload)
            names = object_names(tenant.name, workload.name, list(groups))
            for share, name in zip(groups, names, strict=True):
                manifests.append(
                    workload_object(spec, tenant, workload, share, len(groups[share]), name, pool)
                )
            if workload.serve is not None:
                manifests.append(service(spec, tenant.name, workload.name, workload.serve))
    return manifests


def share_of(placement: Placement, workload: WorkloadSpec) -> GpuShare:
    """What a replica's pod asks for and is told. The planned memory and thread share count only
    where the pod uses them (MPS limits, or `{memory_mib}` / `{thread_percent}` in its command or
    environment), so that whole GPUs of two models do not split a workload for nothing."""
    resource, count = gpu_request(placement)
    text = " ".join([*(workload.command or []), *workload.env.values()])
    mps = placement.mode is Mode.MPS
    return GpuShare(
        mode=placement.mode,
        resource=resource,
        count=count,
        memory_mib=placement.memory_mib if mps or "{memory_mib}" in text else 0,
        thread_percent=placement.thread_percent if mps or "{thread_percent}" in text else None,
    )


def share_groups(
    placements: list[Placement], workload: WorkloadSpec
) -> dict[GpuShare, list[Placement]]:
    """The workload's replicas by what their pods must ask for, in order of first replica."""
    groups: dict[GpuShare, list[Placement]] = {}
    for placement in sorted(placements, key=lambda p: p.replica):
        groups.setdefault(share_of(placement, workload), []).append(placement)
    return groups


def share_suffix(share: GpuShare) -> str:
    """`gpu-2`, `mig-3g-20gb`, `mps`, `timeslice`: the kind and amount of GPU, as a name part."""
    if share.mode is Mode.MIG:
        profile = share.resource.removeprefix("nvidia.com/")
        return profile.replace(".", "-").replace("+", "-").lower()
    if share.mode is Mode.DEDICATED:
        return f"gpu-{share.count}"
    return share.mode.value


def object_names(tenant: str, workload: str, shares: list[GpuShare]) -> list[str]:
    """The workload's name when all its replicas ask alike; else one name per group, suffixed with
    the kind of GPU, then the planned memory and thread share where those are what differ."""
    if len(shares) == 1:
        names = [workload]
    else:
        kinds = Counter(share_suffix(share) for share in shares)
        memories = Counter((share_suffix(share), share.memory_mib) for share in shares)
        names = []
        for share in shares:
            parts = [workload, share_suffix(share)]
            if kinds[parts[1]] > 1:
                parts.append(f"{share.memory_mib}mib")
                if memories[(parts[1], share.memory_mib)] > 1:
                    parts.append(f"t{share.thread_percent}")
            names.append("-".join(parts))
    for name in names:
        if len(name) > MAX_NAME:
            raise KubeRenderError(
                f"{tenant}/{workload}: the plan gives its replicas different GPUs, so it renders "
                f"one object per kind, and {name!r} is over Kubernetes' {MAX_NAME} characters: "
                "shorten the workload name"
            )
    return names


def workload_object(
    spec: GpuplexSpec,
    tenant: TenantSpec,
    workload: WorkloadSpec,
    share: GpuShare,
    replicas: int,
    name: str,
    pool: str | None,
) -> Manifest:
    namespace = namespace_for(spec, tenant.name)
    pod_labels = {INSTANCE_LABEL: name}
    if workload.serve is not None:
        pod_labels[SERVES_LABEL] = "true"
    server = workload.kind in SERVER_KINDS
    template = pod_template(
        tenant=tenant.name,
        workload=workload,
        share=share,
        pool=pool,
        image=workload.image or spec.kubernetes.default_image,
        priority_class=priority_class_name(tenant.priority),
        restart_policy="Always" if server else job_restart_policy(workload),
        extra_labels=pod_labels,
        scheduler_name=spec.kubernetes.scheduler.name if spec.kubernetes.scheduler else None,
    )
    meta = metadata(name, namespace=namespace, tenant=tenant.name, workload=workload.name)
    if server:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": deployment_spec(tenant.name, workload.name, name, replicas, template),
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": job_spec(workload, replicas, template),
    }


def deployment_spec(
    tenant: str, workload: str, name: str, replicas: int, template: dict[str, Any]
) -> dict[str, Any]:
    """A rolling update that never surges: the quota holds exactly the planned GPUs, so a surge pod
    would be refused and the rollout would stall. One old pod stops before its successor starts."""
    return {
        "replicas": replicas,
        "selector": {
            "matchLabels": {TENANT_LABEL: tenant, WORKLOAD_LABEL: workload, INSTANCE_LABEL: name}
        },
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        },
        "template": template,
    }


def job_restart_policy(workload: WorkloadSpec) -> str:
    """A Job's pods cannot restart `always`: a run that exited 0 is done. So `always` and
    `on-failure` restart failed runs in place, `never` runs once."""
    return "Never" if workload.restart.policy is RestartPolicy.NEVER else "OnFailure"


def job_spec(workload: WorkloadSpec, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    """One pod per placed replica, all at once. Indexed, so that a new plan with another replica
    count can change parallelism and completions together (elastic Indexed Jobs) instead of being
    refused; the retry budget is the spec's `max_restarts`, none for `never`."""
    never = workload.restart.policy is RestartPolicy.NEVER
    return {
        "completionMode": "Indexed",
        "parallelism": replicas,
        "completions": replicas,
        "backoffLimit": 0 if never else workload.restart.max_restarts,
        "template": template,
    }


def service(spec: GpuplexSpec, tenant: str, workload: str, serve: ServeSpec) -> Manifest:
    """The served workload's Service on serve.port, over all its pods whatever GPU they got: the
    address the gateway's backends name (naming.service_url)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            service_name(workload),
            namespace=namespace_for(spec, tenant),
            tenant=tenant,
            workload=workload,
        ),
        "spec": {
            "type": "ClusterIP",
            "selector": {TENANT_LABEL: tenant, WORKLOAD_LABEL: workload},
            "ports": [
                {
                    "name": HTTP_PORT_NAME,
                    "port": serve.port,
                    "targetPort": HTTP_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }
