"""The admission policy that sends every tenant Job through Kueue, rendered when the spec's
`queues:` run on Kueue (`kubernetes.kueue`). In a tenant namespace, a batch/v1 Job, and the Job
template of a CronJob (checked when the CronJob is created, not when its first Job is refused):

- must carry the label `kueue.x-k8s.io/queue-name`, so Kueue admits it against the tenant's
  ClusterQueue instead of it starting at once;
- runs its pods at the `gpuplex-queued` priority class (and only a queued Job may), whose
  ResourceQuota holds them to what the tenant's queue may admit;
- asks only for the GPU resources the tenant's queue offers (its isolation decides: a MIG-only
  tenant, MIG slices only), so a Job that could never run is refused at creation instead of being
  held by Kueue in front of the tenant's other Jobs;
- is created suspended, and only Kueue's controller may unsuspend it (start it).

Exempt are the Jobs the plan itself renders (the spec's batch workloads: long-running replicas
the queues count but never preempt), named per namespace. An update may not take the label off a
Job that has it; a Job created before the policy may still be updated (its controller must be able
to finish it). Standard CEL only, as in `gpuplex.kube.admission`.
"""

from __future__ import annotations

from gpuplex.kube.admission import (
    GPU_RESOURCE_PREFIX,
    cel_map_of_lists,
    cel_string,
    tenant_binding,
)
from gpuplex.kube.kueue import JOB_PRIORITIES, LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuplex.kube.naming import QUEUED_PRIORITY_CLASS, Manifest, metadata

POLICY_NAME = "gpuplex-tenant-job-queue"

QUEUE_LABEL = cel_string(QUEUE_NAME_LABEL)
CREATE_OR_HAD_LABEL = (
    "request.operation == 'CREATE' || object.kind == 'CronJob' || "
    f"(has(oldObject.metadata.labels) && {QUEUE_LABEL} in oldObject.metadata.labels)"
)
PLANNED = (
    "request.namespace in variables.plannedJobs ? variables.plannedJobs[request.namespace] : []"
)
#: The labels and pod spec of the Job, or of the Jobs a CronJob will create.
LABELS = (
    "variables.isCron ? (has(object.spec.jobTemplate.metadata) && "
    "has(object.spec.jobTemplate.metadata.labels) ? object.spec.jobTemplate.metadata.labels : {}) "
    ": (has(object.metadata.labels) ? object.metadata.labels : {})"
)
POD_SPEC = (
    "variables.isCron ? object.spec.jobTemplate.spec.template.spec : object.spec.template.spec"
)
CONTAINERS = (
    "variables.podSpec.containers + "
    "(has(variables.podSpec.initContainers) ? variables.podSpec.initContainers : [])"
)
MOST = "request.namespace in variables.podMost ? variables.podMost[request.namespace] : {}"

NAMES_ITS_QUEUE = (
    "(!variables.isCron && object.metadata.name in variables.planned) || variables.queued"
)
QUEUED_CLASS = (
    f"(has(variables.podSpec.priorityClassName) && variables.podSpec.priorityClassName == "
    f"{cel_string(QUEUED_PRIORITY_CLASS)}) == variables.queued"
)


def _within_most(field: str) -> str:
    """No container's `field` asks for a GPU resource the queue does not offer, or more of it
    than one pod can get (a GPU count is an integer quantity: `2`)."""
    return (
        f"!has(c.resources.{field}) || c.resources.{field}.all(r, "
        f"!r.startsWith('{GPU_RESOURCE_PREFIX}') || (r in variables.most && "
        f"int(string(c.resources.{field}[r])) <= variables.most[r]))"
    )


ASKS_WHAT_THE_QUEUE_OFFERS = (
    "!variables.queued || variables.containers.all(c, !has(c.resources) || "
    f"(({_within_most('requests')}) && ({_within_most('limits')})))"
)
SUSPENDED = "has(object.spec.suspend) && object.spec.suspend"
CREATED_SUSPENDED = (
    f"request.operation != 'CREATE' || variables.isCron || !variables.queued || ({SUSPENDED})"
)
STARTED_BY_KUEUE = (
    "request.operation != 'UPDATE' || variables.isCron || !variables.queued || "
    "!(has(oldObject.spec.suspend) && oldObject.spec.suspend) || "
    f"({SUSPENDED}) || request.userInfo.username == variables.kueue"
)

MESSAGE = (
    "a Job in a gpuplex tenant namespace must wait its turn in the tenant's Kueue queue: add the "
    f"label {QUEUE_NAME_LABEL}: {LOCAL_QUEUE} to the Job's metadata (a CronJob: to "
    f"spec.jobTemplate.metadata; optionally {PRIORITY_CLASS_LABEL}: one of "
    f"{', '.join(JOB_PRIORITIES)})"
)
CLASS_MESSAGE = (
    f"a queued Job's pods run at priority class {QUEUED_PRIORITY_CLASS}, and only a queued Job's "
    f"do: set spec.template.spec.priorityClassName: {QUEUED_PRIORITY_CLASS} (a CronJob: in "
    "spec.jobTemplate) with the queue label, or the tenant's class without it"
)
RESOURCES_MESSAGE = (
    "a queued Job in a gpuplex tenant namespace may ask only for the GPU resources its tenant's "
    "Kueue queue offers, which the tenant's isolation decides, and per pod no more than the queue "
    "may admit and one node has free (see its ClusterQueue gpuplex-<tenant>, and the namespace's "
    "ResourceQuota gpuplex-queued-quota): it could never run; change its nvidia.com/ requests "
    "and limits"
)
SUSPEND_MESSAGE = (
    "a queued Job is created suspended (spec.suspend: true) and only Kueue starts it, when the "
    "tenant's queue admits it"
)


def job_queue_policy(
    planned_jobs: dict[str, list[str]], pod_most: dict[str, dict[str, int]], kueue_user: str
) -> list[Manifest]:
    """The policy and its binding to every tenant namespace; `planned_jobs`: namespace -> the
    names of the Jobs the plan renders there; `pod_most`: namespace -> GPU resource -> the most
    one pod of a queued Job may ask for; `kueue_user`: the user name of Kueue's controller."""
    policy: Manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata(POLICY_NAME),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["jobs", "cronjobs"],
                    }
                ]
            },
            "matchConditions": [{"name": "created-or-labelled", "expression": CREATE_OR_HAD_LABEL}],
            "variables": [
                {"name": "plannedJobs", "expression": cel_map_of_lists(planned_jobs)},
                {"name": "planned", "expression": PLANNED},
                {"name": "isCron", "expression": "object.kind == 'CronJob'"},
                {"name": "labels", "expression": LABELS},
                {"name": "queued", "expression": f"{QUEUE_LABEL} in variables.labels"},
                {"name": "podSpec", "expression": POD_SPEC},
                {"name": "containers", "expression": CONTAINERS},
                {"name": "podMost", "expression": cel_map_of_counts(pod_most)},
                {"name": "most", "expression": MOST},
                {"name": "kueue", "expression": cel_string(kueue_user)},
            ],
            "validations": [
                {"expression": NAMES_ITS_QUEUE, "message": MESSAGE, "reason": "Forbidden"},
                {"expression": QUEUED_CLASS, "message": CLASS_MESSAGE, "reason": "Forbidden"},
                {
                    "expression": ASKS_WHAT_THE_QUEUE_OFFERS,
                    "message": RESOURCES_MESSAGE,
                    "reason": "Forbidden",
                },
                {
                    "expression": CREATED_SUSPENDED,
                    "message": SUSPEND_MESSAGE,
                    "reason": "Forbidden",
                },
                {"expression": STARTED_BY_KUEUE, "message": SUSPEND_MESSAGE, "reason": "Forbidden"},
            ],
        },
    }
    return [policy, tenant_binding(POLICY_NAME)]


def cel_map_of_counts(entries: dict[str, dict[str, int]]) -> str:
    """`{'ns-a': {'nvidia.com/gpu': 4}, 'ns-b': {}}`, keys sorted so the output is stable."""
    pairs = (
        f"{cel_string(key)}: {{"
        + ", ".join(f"{cel_string(r)}: {n}" for r, n in sorted(entries[key].items()))
        + "}"
        for key in sorted(entries)
    )
    return "{" + ", ".join(pairs) + "}"
