"""The admission policy that keeps each tenant's pods to the GPUs the plan gives it.

The ResourceQuota caps how many of each GPU resource a tenant namespace holds, but a quota of zero
only says "none of these"; it cannot tell a pod that asks for a resource the quota does not list,
and it says nothing about priority. This ValidatingAdmissionPolicy closes both gaps at admission:
a pod in a tenant namespace may ask only for the `nvidia.com/` resources the plan grants that tenant
(in requests or limits, in containers or init containers), and must run at its tenant's priority
class, so a tenant can neither take a kind of GPU it was not planned for nor jump the preemption
order.

The CEL sticks to standard CEL (map and list literals, `in`, `all`, `has`, `startsWith`, the
conditional) so that the tests can run the very expressions Kubernetes runs, with cel-python.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import (
    QUEUED_PRIORITY_CLASS,
    TENANT_LABEL,
    Manifest,
    metadata,
    namespace_for,
    priority_class_name,
    tenant_gpu_requests,
)

POLICY_NAME = "gpuplex-tenant-gpu-resources"
GPU_RESOURCE_PREFIX = "nvidia.com/"

#: A pod's spec cannot change its resources or priority class after creation, so an update that
#: leaves the spec alone (a label, an owner reference, a finalizer removed by the Job controller)
#: is not checked again: a pod admitted under an older plan must still be able to finish.
MATCH_CREATE_OR_SPEC_CHANGE = "request.operation == 'CREATE' || object.spec != oldObject.spec"

#: Every container whose resources are checked: init containers can hold a GPU as well.
CONTAINERS = (
    "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
)

#: The GPU resources granted to the pod's namespace; none for a namespace the plan does not know.
ALLOWED = "request.namespace in variables.grants ? variables.grants[request.namespace] : []"


def only_allowed(field: str) -> str:
    """`c.resources.<field>` names no `nvidia.com/` resource outside the namespace's grant. Each
    level is guarded with `has`, since a container may omit resources, or requests, or limits."""
    return (
        f"!has(c.resources.{field}) || c.resources.{field}.all(r, "
        f"!r.startsWith('{GPU_RESOURCE_PREFIX}') || r in variables.allowed)"
    )


GPU_RESOURCES_ALLOWED = (
    "variables.containers.all(c, !has(c.resources) || "
    f"(({only_allowed('requests')}) && ({only_allowed('limits')})))"
)

PRIORITY_CLASS_IS_TENANTS = (
    "has(object.spec.priorityClassName) && request.namespace in variables.priorityClasses"
    " && object.spec.priorityClassName == variables.priorityClasses[request.namespace]"
)

#: Who creates the pods of a Job: the Job controller, under its own service account where the
#: controller manager runs with `--use-service-account-credentials` (as kubeadm and the managed
#: clusters do), else as the controller manager itself. A tenant can be neither.
JOB_CONTROLLER_USERS = (
    "system:serviceaccount:kube-system:job-controller",
    "system:kube-controller-manager",
)

#: With Kueue: a pod at the queued class is a queued Job's, and asks only for what the tenant's
#: queue offers.
QUEUED_POD = (
    f"has(object.spec.priorityClassName) && object.spec.priorityClassName == "
    f"'{QUEUED_PRIORITY_CLASS}'"
)
ALLOWED_WITH_QUEUES = (
    "variables.queuedPod ? (request.namespace in variables.queueGrants ? "
    "variables.queueGrants[request.namespace] : []) : " + ALLOWED
)
QUEUED_BY_JOB_CONTROLLER = (
    "variables.queuedPod && request.namespace in variables.queueGrants && "
    "request.userInfo.username in variables.jobControllers"
)


def admission_policy(
    spec: GpuplexSpec, plan: Plan, queue_grants: dict[str, list[str]] | None = None
) -> list[Manifest]:
    """The ValidatingAdmissionPolicy and its binding to every tenant namespace (namespaces labelled
    with the tenant). Rendered even for a plan with no placements: then no tenant pod may ask for
    any GPU, which is what the plan says.

    `queue_grants` (with Kueue: namespace -> the GPU resources the tenant's queue offers) lets a
    pod run at the `gpuplex-queued` class when the Job controller creates it (a queued Job's pod)
    and ask for those resources; its ResourceQuota holds it to what Kueue may admit."""
    grants = {
        namespace_for(spec, tenant.name): [
            resource
            for resource, count in tenant_gpu_requests(plan, tenant.name).items()
            if count > 0
        ]
        for tenant in spec.tenants
    }
    priorities = {
        namespace_for(spec, tenant.name): priority_class_name(tenant.priority)
        for tenant in spec.tenants
    }
    policy: Manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(POLICY_NAME),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "created-or-spec-changed", "expression": MATCH_CREATE_OR_SPEC_CHANGE}
            ],
            "variables": _variables(grants, priorities, queue_grants),
            "validations": [
                {
                    "expression": GPU_RESOURCES_ALLOWED,
                    "message": (
                        "a pod in a gpuplex tenant namespace may ask only for the GPU resources "
                        "the plan gives its tenant (see the namespace's ResourceQuota "
                        "gpuplex-quota); change the pod's nvidia.com/ requests and limits, or the "
                        "spec and apply the new plan"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": PRIORITY_CLASS_IS_TENANTS
                    if queue_grants is None
                    else f"({PRIORITY_CLASS_IS_TENANTS}) || ({QUEUED_BY_JOB_CONTROLLER})",
                    "message": (
                        "a pod in a gpuplex tenant namespace must set priorityClassName to its "
                        "tenant's class (gpuplex-priority-<tenant priority>), so preemption "
                        "follows the spec's priorities"
                        + (
                            ""
                            if queue_grants is None
                            else f"; only the Job controller makes pods at {QUEUED_PRIORITY_CLASS}"
                            " (the pods of Jobs queued through Kueue)"
                        )
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    }
    return [policy, tenant_binding(POLICY_NAME)]


def _variables(
    grants: dict[str, list[str]],
    priorities: dict[str, str],
    queue_grants: dict[str, list[str]] | None,
) -> list[dict[str, str]]:
    variables = [{"name": "grants", "expression": cel_map_of_lists(grants)}]
    if queue_grants is None:
        variables.append({"name": "allowed", "expression": ALLOWED})
    else:
        variables += [
            {"name": "queueGrants", "expression": cel_map_of_lists(queue_grants)},
            {"name": "jobControllers", "expression": cel_list(JOB_CONTROLLER_USERS)},
            {"name": "queuedPod", "expression": QUEUED_POD},
            {"name": "allowed", "expression": ALLOWED_WITH_QUEUES},
        ]
    variables += [
        {"name": "priorityClasses", "expression": cel_map_of_strings(priorities)},
        {"name": "containers", "expression": CONTAINERS},
    ]
    return variables


def tenant_binding(policy_name: str) -> Manifest:
    """Binds a policy, denying, to every tenant namespace (namespaces labelled with the tenant)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": metadata(policy_name),
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [{"key": TENANT_LABEL, "operator": "Exists"}]
                }
            },
        },
    }


def cel_string(text: str) -> str:
    """A CEL string literal. Names here are DNS labels and resource names, but escape anyway so a
    quote can never end the literal early."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def cel_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(cel_string(item) for item in items) + "]"


def cel_map_of_lists(entries: dict[str, list[str]]) -> str:
    """`{'ns-a': ['nvidia.com/gpu'], 'ns-b': []}`, keys sorted so the output is stable."""
    pairs = (f"{cel_string(key)}: {cel_list(entries[key])}" for key in sorted(entries))
    return "{" + ", ".join(pairs) + "}"


def cel_map_of_strings(entries: dict[str, str]) -> str:
    pairs = (f"{cel_string(key)}: {cel_string(entries[key])}" for key in sorted(entries))
    return "{" + ", ".join(pairs) + "}"
