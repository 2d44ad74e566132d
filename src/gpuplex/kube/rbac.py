"""Who may do what in a tenant namespace: an admin Role that runs workloads but cannot touch the
fences gpuplex puts up (RBAC, quota, limits, network policies), and a read-only viewer Role that
cannot read Secrets. Both are bound to the groups named in `kubernetes:` with `{tenant}` filled in,
so each namespace's bindings name that tenant's groups and no one else's.
"""

from __future__ import annotations

from typing import Any

from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.kubernetes import TENANT_PLACEHOLDER
from gpuplex.kube.naming import Manifest, metadata

ADMIN_ROLE = "gpuplex-tenant-admin"
VIEWER_ROLE = "gpuplex-tenant-viewer"
ADMIN_BINDING = "gpuplex-tenant-admins"
VIEWER_BINDING = "gpuplex-tenant-viewers"
RBAC_GROUP = "rbac.authorization.k8s.io"

READ = ["get", "list", "watch"]
WRITE = [*READ, "create", "update", "patch", "delete", "deletecollection"]

Rule = dict[str, Any]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> Rule:
    return {"apiGroups": groups, "resources": resources, "verbs": list(verbs)}


#: Admins run their own workloads. Deliberately absent: roles and bindings (no granting oneself
#: more), resourcequotas, limitranges and networkpolicies (read-only: gpuplex owns them),
#: daemonsets (a pod on every node, GPU or not) and serviceaccount tokens.
ADMIN_RULES: list[Rule] = [
    _rule(
        [""],
        ["pods", "services", "configmaps", "secrets", "persistentvolumeclaims"],
        WRITE,
    ),
    _rule([""], ["pods/log", "endpoints", "events", "resourcequotas", "limitranges"], READ),
    _rule([""], ["pods/exec", "pods/portforward", "pods/attach"], ["get", "create"]),
    _rule(["apps"], ["deployments", "statefulsets", "replicasets"], WRITE),
    _rule(["apps"], ["deployments/scale", "statefulsets/scale"], ["get", "update", "patch"]),
    _rule(["batch"], ["jobs", "cronjobs"], WRITE),
    _rule(["autoscaling"], ["horizontalpodautoscalers"], WRITE),
    _rule(["policy"], ["poddisruptionbudgets"], WRITE),
    _rule(["events.k8s.io"], ["events"], READ),
    _rule(["networking.k8s.io"], ["networkpolicies"], READ),
]

#: Viewers see what runs and why it may not; Secrets are left out (list/watch would reveal them).
VIEWER_RULES: list[Rule] = [
    _rule(
        [""],
        [
            "pods",
            "pods/log",
            "services",
            "endpoints",
            "configmaps",
            "persistentvolumeclaims",
            "events",
            "resourcequotas",
            "limitranges",
        ],
        READ,
    ),
    _rule(["apps"], ["deployments", "statefulsets", "replicasets"], READ),
    _rule(["batch"], ["jobs", "cronjobs"], READ),
    _rule(["autoscaling"], ["horizontalpodautoscalers"], READ),
    _rule(["policy"], ["poddisruptionbudgets"], READ),
    _rule(["events.k8s.io"], ["events"], READ),
    _rule(["networking.k8s.io"], ["networkpolicies"], READ),
]


#: With Kueue: a tenant sees its queue and why its Jobs wait (Kueue writes both; nobody else may).
KUEUE_READ_RULE = _rule(["kueue.x-k8s.io"], ["localqueues", "workloads"], READ)


def tenant_groups(templates: list[str], tenant: str) -> list[str]:
    """The configured group names with `{tenant}` filled in, each once, in the order given."""
    groups: list[str] = []
    for template in templates:
        group = template.replace(TENANT_PLACEHOLDER, tenant)
        if group not in groups:
            groups.append(group)
    return groups


def rbac_manifests(spec: GpuplexSpec, namespace: str, tenant: str) -> list[Manifest]:
    """Both Roles always (so a binding added by hand has something to point at), a RoleBinding for
    each Role that has groups to bind."""
    extra = [KUEUE_READ_RULE] if spec.kubernetes.kueue is not None and spec.queues.enabled else []
    manifests = [
        role(ADMIN_ROLE, [*ADMIN_RULES, *extra], namespace, tenant),
        role(VIEWER_ROLE, [*VIEWER_RULES, *extra], namespace, tenant),
    ]
    for binding, role_name, templates in (
        (ADMIN_BINDING, ADMIN_ROLE, spec.kubernetes.admin_groups),
        (VIEWER_BINDING, VIEWER_ROLE, spec.kubernetes.viewer_groups),
    ):
        groups = tenant_groups(templates, tenant)
        if groups:
            manifests.append(role_binding(binding, role_name, groups, namespace, tenant))
    return manifests


def role(name: str, rules: list[Rule], namespace: str, tenant: str) -> Manifest:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "Role",
        "metadata": metadata(name, namespace=namespace, tenant=tenant),
        "rules": [{key: list(value) for key, value in rule.items()} for rule in rules],
    }


def role_binding(
    name: str, role_name: str, groups: list[str], namespace: str, tenant: str
) -> Manifest:
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": metadata(name, namespace=namespace, tenant=tenant),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": role_name},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group} for group in groups],
    }
