"""PriorityClasses: the spec's tenant priorities as Kubernetes scheduling priorities, so the
scheduler evicts the same pods the planner would (`policy.preemption`) and never otherwise.

One class per distinct priority rather than per tenant: tenants of equal priority are equals to the
scheduler too, and the classes stay few however many tenants there are.
"""

from __future__ import annotations

from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import (
    QUEUED_PRIORITY_CLASS,
    QUEUED_PRIORITY_VALUE,
    Manifest,
    metadata,
    priority_class_name,
    priority_class_value,
)

PREEMPT = "PreemptLowerPriority"
NEVER_PREEMPT = "Never"


def priority_classes(spec: GpuplexSpec) -> list[Manifest]:
    """Highest priority first. With `policy.preemption: false` a pending pod waits for room rather
    than evicting lower-priority pods, as the planner does."""
    tenants_by_priority: dict[int, list[str]] = {}
    for tenant in spec.tenants:
        tenants_by_priority.setdefault(tenant.priority, []).append(tenant.name)
    policy = PREEMPT if spec.policy.preemption else NEVER_PREEMPT
    classes: list[Manifest] = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": metadata(priority_class_name(priority)),
            "value": priority_class_value(priority),
            "globalDefault": False,
            "preemptionPolicy": policy,
            "description": _description(priority, tenants_by_priority[priority]),
        }
        for priority in sorted(tenants_by_priority, reverse=True)
    ]
    if spec.kubernetes.kueue is not None and spec.queues.enabled:
        classes.append(queued_priority_class())
    return classes


def queued_priority_class() -> Manifest:
    """Queued Jobs' pods: below every tenant, and never preempting at the scheduler (Kueue
    decides which queued Job runs and which is preempted)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": metadata(QUEUED_PRIORITY_CLASS),
        "value": QUEUED_PRIORITY_VALUE,
        "globalDefault": False,
        "preemptionPolicy": NEVER_PREEMPT,
        "description": "gpuplex: pods of Jobs queued through Kueue",
    }


def _description(priority: int, tenants: list[str]) -> str:
    noun = "tenant" if len(tenants) == 1 else "tenants"
    return f"gpuplex tenant priority {priority}: {noun} {', '.join(tenants)}"
