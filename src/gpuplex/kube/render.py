"""`gpuplex kube render`: the spec and its plan as Kubernetes objects, in the order they apply.

Pure: no cluster, no files. Each part lives in its own module; this one only puts them in order:
cluster-scoped first (priority classes, device-plugin and MIG configs, node labels, the admission
policy), then per tenant (namespace, quota, RBAC, network policies), then the workloads, then,
when the spec's `queues:` run on Kueue (`kubernetes.kueue`), the Kueue objects and the policy that
sends tenant Jobs through them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.admission import admission_policy
from gpuplex.kube.job_queue_policy import job_queue_policy
from gpuplex.kube.kueue import kueue_manifests, queue_quotas
from gpuplex.kube.kueue_flavors import KueueFlavors
from gpuplex.kube.naming import Manifest, namespace_for
from gpuplex.kube.node_config import node_config
from gpuplex.kube.priorities import priority_classes
from gpuplex.kube.self_manifests import SelfOptions, self_manifests
from gpuplex.kube.self_scheduling import placement_notes
from gpuplex.kube.tenants import tenant_manifests
from gpuplex.kube.workloads import workload_manifests


@dataclass(frozen=True, slots=True)
class Rendered:
    manifests: list[Manifest]
    #: What the operator should know: replicas the plan could not place, pools Kubernetes can only
    #: approximate. Printed by the CLI; never silently dropped.
    notes: list[str] = field(default_factory=list)


def render_plan(spec: GpuplexSpec, plan: Plan) -> Rendered:
    nodes = node_config(spec, plan)
    notes = list(nodes.notes)
    for unit in plan.infeasible:
        notes.append(f"{unit.label()} is not rendered: the plan could not place it")
    workloads = workload_manifests(spec, plan)
    queues, queue_notes = kueue_manifests(spec, plan)
    quotas = queue_quotas(spec, plan)
    most = None if quotas is None else {t: quotas.most(t) for t in quotas.offered}
    per_pod = None if quotas is None or most is None else pod_most(spec, most, quotas.flavors)
    grants = None if per_pod is None else {ns: sorted(r) for ns, r in per_pod.items()}
    manifests = [
        *priority_classes(spec),
        *nodes.manifests,
        *admission_policy(spec, plan, grants),
        *tenant_manifests(spec, plan, most),
        *workloads,
    ]
    if per_pod is not None and spec.kubernetes.kueue is not None:
        policy = job_queue_policy(planned_jobs(workloads), per_pod, spec.kubernetes.kueue.username)
        manifests += [*policy, *queues]
    return Rendered(manifests, notes + queue_notes)


def pod_most(
    spec: GpuplexSpec, most: dict[str, dict[str, int]], flavors: KueueFlavors
) -> dict[str, dict[str, int]]:
    """Namespace -> GPU resource -> the most one pod of a queued Job may ask for: what the
    tenant's queue may admit, and what one node has free, whichever is less. A resource it may
    never hold is absent: a Job asking for it (or for more) could never run, and is refused when
    it is created rather than held by Kueue forever."""
    out: dict[str, dict[str, int]] = {}
    for tenant, resources in most.items():
        limits = {r: min(n, flavors.most_on_a_node.get(r, 0)) for r, n in resources.items()}
        out[namespace_for(spec, tenant)] = {r: n for r, n in limits.items() if n > 0}
    return out


def planned_jobs(workloads: list[Manifest]) -> dict[str, list[str]]:
    """Namespace -> the Jobs the plan renders there (exempt from the queue-name rule)."""
    out: dict[str, list[str]] = {}
    for manifest in workloads:
        if manifest["kind"] == "Job":
            meta = manifest["metadata"]
            out.setdefault(meta["namespace"], []).append(meta["name"])
    return out


def render_self(spec: GpuplexSpec, options: SelfOptions) -> Rendered:
    """gpuplex's own objects, and a note where no fleet node could take its pods."""
    manifests = self_manifests(spec, options)
    return Rendered(manifests, placement_notes(spec, options.node_selector, options.tolerations))
