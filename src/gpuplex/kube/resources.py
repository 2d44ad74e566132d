"""Every kind gpuplex renders, with where the Kubernetes API serves it: API group and version, the
plural in the URL, and whether objects live in a namespace.

A static table instead of the API's discovery documents: applying a few dozen objects then costs no
discovery round-trips, and a kind gpuplex does not know is a bug found before the first request,
not halfway through an apply. Pure: no client, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import PLAN_SET, SELF_SET, Manifest

_PLAN = frozenset({PLAN_SET})
_SELF = frozenset({SELF_SET})
_BOTH = _PLAN | _SELF


@dataclass(frozen=True, slots=True)
class ResourceKind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool
    #: False for Nodes: gpuplex only labels and taints nodes; it never creates or deletes one.
    prunable: bool = True
    #: A custom resource (ServiceMonitor): the cluster may not have its definition installed.
    custom: bool = False
    #: The sets that render this kind: apply refuses it in another set, and a set's prune lists
    #: only its own kinds, so the reconciler's role needs no rights on the other set's kinds.
    sets: frozenset[str] = _BOTH

    @property
    def group(self) -> str:
        """The API group, "" for the core group (`v1`)."""
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def resource(self) -> str:
        """`deployments.apps`, `configmaps`: how RBAC and kubectl name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def collection_path(self, namespace: str | None = None) -> str:
        """URL path of the collection: in one namespace, or across all (namespace None)."""
        root = f"/api/{self.api_version}" if not self.group else f"/apis/{self.api_version}"
        if self.namespaced and namespace is not None:
            return f"{root}/namespaces/{_segment(namespace)}/{self.plural}"
        return f"{root}/{self.plural}"

    def object_path(self, name: str, namespace: str | None) -> str:
        if self.namespaced and not namespace:
            raise KubeRenderError(f"{self.kind}/{name} has no metadata.namespace")
        return f"{self.collection_path(namespace)}/{_segment(name)}"


def _segment(text: str) -> str:
    return quote(text, safe="")


KINDS: tuple[ResourceKind, ...] = (
    ResourceKind("v1", "Namespace", "namespaces", namespaced=False),
    ResourceKind(
        "scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", namespaced=False, sets=_PLAN
    ),
    ResourceKind("v1", "Node", "nodes", namespaced=False, prunable=False, sets=_PLAN),
    ResourceKind(
        "rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False, sets=_SELF
    ),
    ResourceKind(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
        sets=_SELF,
    ),
    ResourceKind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        namespaced=False,
        sets=_PLAN,
    ),
    ResourceKind(
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        namespaced=False,
        sets=_PLAN,
    ),
    ResourceKind("v1", "ServiceAccount", "serviceaccounts", namespaced=True, sets=_SELF),
    ResourceKind("v1", "ConfigMap", "configmaps", namespaced=True),
    ResourceKind("v1", "ResourceQuota", "resourcequotas", namespaced=True, sets=_PLAN),
    ResourceKind("v1", "LimitRange", "limitranges", namespaced=True, sets=_PLAN),
    ResourceKind("rbac.authorization.k8s.io/v1", "Role", "roles", namespaced=True),
    ResourceKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", namespaced=True),
    ResourceKind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", namespaced=True),
    ResourceKind("v1", "Service", "services", namespaced=True),
    ResourceKind("apps/v1", "Deployment", "deployments", namespaced=True),
    ResourceKind("batch/v1", "Job", "jobs", namespaced=True, sets=_PLAN),
    ResourceKind(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        namespaced=True,
        sets=_SELF,
    ),
    ResourceKind(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        "servicemonitors",
        namespaced=True,
        custom=True,
        sets=_SELF,
    ),
    ResourceKind(
        "monitoring.coreos.com/v1",
        "PodMonitor",
        "podmonitors",
        namespaced=True,
        custom=True,
        sets=_SELF,
    ),
)

#: Kueue's kinds (kueue.x-k8s.io/v1beta2), rendered from `queues:`; a cluster without Kueue skips them.
KUEUE_KINDS: tuple[ResourceKind, ...] = tuple(
    ResourceKind(
        "kueue.x-k8s.io/v1beta2", kind, plural, namespaced=namespaced, custom=True, sets=_PLAN
    )
    for kind, plural, namespaced in (
        # the order they are pruned in: what refers to another kind goes first
        ("LocalQueue", "localqueues", True),
        ("ClusterQueue", "clusterqueues", False),
        ("Cohort", "cohorts", False),
        ("WorkloadPriorityClass", "workloadpriorityclasses", False),
        ("ResourceFlavor", "resourceflavors", False),
    )
)
KINDS += KUEUE_KINDS

_BY_TYPE = {(kind.api_version, kind.kind): kind for kind in KINDS}

#: Identity of one object: (apiVersion, kind, namespace or "", name).
ObjectKey = tuple[str, str, str, str]


def kind_of(manifest: Manifest) -> ResourceKind:
    """The table entry for a rendered object; an object of a kind not in the table is refused
    before anything is sent, since gpuplex could neither apply nor prune it reliably."""
    found = _BY_TYPE.get((manifest.get("apiVersion", ""), manifest.get("kind", "")))
    if found is None:
        raise KubeRenderError(
            f"gpuplex cannot apply {manifest.get('apiVersion')} {manifest.get('kind')} "
            f"{manifest.get('metadata', {}).get('name')!r}: the kind is not in "
            "gpuplex.kube.resources.KINDS"
        )
    return found


def object_key(kind: ResourceKind, item: Manifest) -> ObjectKey:
    """Key of an object, rendered or listed (list items carry no apiVersion/kind of their own)."""
    meta = item.get("metadata", {})
    namespace = meta.get("namespace", "") if kind.namespaced else ""
    return (kind.api_version, kind.kind, namespace or "", meta.get("name", ""))


def key_id(key: ObjectKey) -> str:
    """`Kind/namespace/name`, as `gpuplex.kube.output.object_id` names a manifest."""
    _, kind, namespace, name = key
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def _apply_rank(kind: ResourceKind) -> int:
    if kind.kind == "Namespace":
        return 0
    if kind.custom:
        return 3
    return 2 if kind.namespaced else 1


def apply_order(manifests: list[Manifest]) -> list[tuple[ResourceKind, Manifest]]:
    """Namespaces first, then other cluster-scoped objects (priority classes, nodes, admission
    policy), then namespaced objects, custom resources last (a cluster without their definitions
    still gets everything else). Render order is kept within each group."""
    kinds = [(kind_of(manifest), manifest) for manifest in manifests]
    return sorted(kinds, key=lambda pair: _apply_rank(pair[0]))


def prune_order(kinds: list[ResourceKind]) -> list[ResourceKind]:
    """The reverse: what lives in a namespace goes before the namespace."""
    return sorted(kinds, key=_apply_rank, reverse=True)


def prunable_kinds(set_name: str) -> list[ResourceKind]:
    """Every kind the set may have created, so one that is no longer rendered at all (an
    autoscaler switched off) is still found and pruned. Never Nodes."""
    return prune_order([kind for kind in kinds_of_set(set_name) if kind.prunable])


def kinds_of_set(set_name: str) -> list[ResourceKind]:
    """The kinds the set (`plan` or `self`) renders, in table order."""
    return [kind for kind in KINDS if set_name in kind.sets]
