"""The `kubernetes:` section: how `gpuplex kube render` names and bounds what it renders.

Everything here has a default, so a spec written for one server renders for Kubernetes unchanged.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, StrictInt, field_validator

from gpuplex.core.spec.fields import DnsLabel, SpecModel

TENANT_PLACEHOLDER = "{tenant}"


class NamespaceQuotaSpec(SpecModel):
    """What one tenant namespace may hold besides GPUs (ResourceQuota; LimitRange defaults)."""

    cpu_cores: StrictInt = Field(default=64, ge=1, description="requests.cpu and limits.cpu.")
    memory_gib: StrictInt = Field(
        default=256, ge=1, description="requests.memory and limits.memory."
    )
    pvcs: StrictInt = Field(default=20, ge=0, description="PersistentVolumeClaims.")
    storage_gib: StrictInt = Field(default=1000, ge=0, description="requests.storage.")


class KueueSpec(SpecModel):
    """Where the cluster runs Kueue: `queues:` are rendered as Kueue objects, and tenant Jobs must
    go through them."""

    service_account: str = Field(
        default="kueue-system/kueue-controller-manager",
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description=(
            "Kueue's controller, namespace/name of its service account: the only one allowed "
            "to start (unsuspend) a queued Job."
        ),
    )

    @property
    def username(self) -> str:
        """The user name the API server gives the service account."""
        namespace, name = self.service_account.split("/")
        return f"system:serviceaccount:{namespace}:{name}"


class SchedulerSpec(SpecModel):
    """A second kube-scheduler for gpuplex's workloads, placing GPU pods by gpuplex's policy
    through the gpuplex scheduler extender; the cluster's default scheduler is left as it is."""

    name: DnsLabel = Field(
        default="gpuplex-scheduler",
        description="The scheduler's name: the `schedulerName` gpuplex's workloads carry.",
    )
    policy: Literal[
        "best-fit", "fgd", "fgd-balanced", "first-fit", "gpu-packing", "dot-product"
    ] = Field(
        default="best-fit",
        description="The placement policy for pods asking whole GPUs (`gpuplex simulate`).",
    )
    mode: Literal["decide", "score"] = Field(
        default="decide",
        description=(
            "decide: the extender narrows the nodes to the policy's choice; score: it scores "
            "the nodes (0..10, weight 5) beside kube-scheduler's own scores."
        ),
    )
    kube_scheduler_image: str = Field(
        default="registry.k8s.io/kube-scheduler:v1.36.3",
        min_length=1,
        description="The kube-scheduler image; use the cluster's own Kubernetes version.",
    )


class KubernetesSpec(SpecModel):
    namespace_prefix: str = Field(
        default="",
        pattern=r"^([a-z0-9][-a-z0-9]{0,19})?$",
        description="Tenant namespace = prefix + tenant name, e.g. 'tenant-'.",
    )
    system_namespace: DnsLabel = Field(
        default="gpuplex-system", description="Where the gpuplex server and gateway run."
    )
    gpu_operator_namespace: DnsLabel = Field(
        default="gpu-operator",
        description="Where the NVIDIA GPU operator (device plugin, MIG manager) runs.",
    )
    admin_groups: list[str] = Field(
        default_factory=lambda: ["gpuplex:{tenant}:admins"],
        description="Groups bound to a tenant namespace's admin Role; {tenant} is filled in.",
    )
    viewer_groups: list[str] = Field(
        default_factory=lambda: ["gpuplex:{tenant}:viewers"],
        description="Groups bound to a tenant namespace's viewer Role; {tenant} is filled in.",
    )
    namespace_quota: NamespaceQuotaSpec = Field(
        default_factory=NamespaceQuotaSpec,
        description="Every tenant namespace's CPU, memory and storage quota unless the tenant sets its own.",
    )
    kueue: KueueSpec | None = Field(
        default=None,
        description=(
            "Set (`kueue: {}`) where the cluster runs Kueue: `queues:` become Kueue objects and "
            "tenant Jobs must name their queue. Without it `queues:` run on one server only."
        ),
    )
    scheduler: SchedulerSpec | None = Field(
        default=None,
        description=(
            "Set (`scheduler: {}`) to run gpuplex's second kube-scheduler with its extender "
            "(rendered with --self) and give gpuplex's workloads its schedulerName."
        ),
    )
    default_image: str = Field(
        default="registry.local/gpuplex/model-server:latest",
        min_length=1,
        description="Image of workloads that name none.",
    )

    @field_validator("admin_groups", "viewer_groups")
    @classmethod
    def _groups_named(cls, groups: list[str]) -> list[str]:
        for group in groups:
            if not group.strip():
                raise ValueError("a group name is empty")
        return groups
