"""The admission policy that sends every tenant Job through Kueue: when the spec has `queues:`, a
batch/v1 Job created in a tenant namespace must carry the `kueue.x-k8s.io/queue-name` label, so
Kueue admits it against the tenant's ClusterQueue instead of it starting at once.

Exempt are the Jobs the plan itself renders (the spec's batch workloads: long-running replicas
the queues count but never preempt), named per namespace. An update may not take the label off a
Job that has it; a Job created before the policy may still be updated (its controller must be able
to finish it). Standard CEL only, as in `gpuplex.kube.admission`.
"""

from __future__ import annotations

from gpuplex.kube.admission import cel_map_of_lists, cel_string, tenant_binding
from gpuplex.kube.kueue import JOB_PRIORITIES, LOCAL_QUEUE, PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from gpuplex.kube.naming import Manifest, metadata

POLICY_NAME = "gpuplex-tenant-job-queue"

HAS_QUEUE_LABEL = (
    f"has(object.metadata.labels) && {cel_string(QUEUE_NAME_LABEL)} in object.metadata.labels"
)
CREATE_OR_HAD_LABEL = (
    "request.operation == 'CREATE' || "
    f"(has(oldObject.metadata.labels) && {cel_string(QUEUE_NAME_LABEL)} in oldObject.metadata.labels)"
)
PLANNED = (
    "request.namespace in variables.plannedJobs ? variables.plannedJobs[request.namespace] : []"
)

MESSAGE = (
    "a Job in a gpuplex tenant namespace must wait its turn in the tenant's Kueue queue: add the "
    f"label {QUEUE_NAME_LABEL}: {LOCAL_QUEUE} to the Job's metadata (and optionally "
    f"{PRIORITY_CLASS_LABEL}: one of {', '.join(JOB_PRIORITIES)})"
)


def job_queue_policy(planned_jobs: dict[str, list[str]]) -> list[Manifest]:
    """The policy and its binding to every tenant namespace; `planned_jobs`: namespace -> the
    names of the Jobs the plan renders there."""
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
                        "resources": ["jobs"],
                    }
                ]
            },
            "matchConditions": [{"name": "created-or-labelled", "expression": CREATE_OR_HAD_LABEL}],
            "variables": [
                {"name": "plannedJobs", "expression": cel_map_of_lists(planned_jobs)},
                {"name": "planned", "expression": PLANNED},
            ],
            "validations": [
                {
                    "expression": f"object.metadata.name in variables.planned || {HAS_QUEUE_LABEL}",
                    "message": MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    }
    return [policy, tenant_binding(POLICY_NAME)]
