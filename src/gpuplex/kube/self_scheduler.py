"""gpuplex's second scheduler (`kubernetes.scheduler` in the spec; rendered with `--self`): a
kube-scheduler of its own name whose configuration calls the gpuplex scheduler extender
(`gpuplex kube extender`) for pods asking whole GPUs or MIG slices, and the extender itself.

A second kube-scheduler, not a second profile of the cluster's own: KubeSchedulerConfiguration's
`extenders` apply to every profile of a scheduler, so adding them to the cluster's scheduler would
route its other pods through gpuplex too. This one schedules only the pods that name it
(`spec.schedulerName`, which gpuplex's rendered workloads carry); everything else stays with the
default scheduler.

The extender is `ignorable`: when it is down or answers an error, kube-scheduler places the pod
by its own scoring (what that costs is measured in tests/kube_real/test_scheduler_extender.py and
written in docs/kubernetes.md). Only the scheduler may reach it (a NetworkPolicy): a call names a
pod and nodes, and a forged one must not steer placements.

Objects: the ServiceAccounts, the scheduler's bindings to the built-in `system:kube-scheduler`
and `system:volume-scheduler` roles (and a Role for its leader-election Lease), the extender's
read-only ClusterRole (nodes and pods), the configuration ConfigMap, both Deployments, the
extender's Service and NetworkPolicy.
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.kubernetes import SchedulerSpec
from gpuplex.kube.naming import GPU_RESOURCE, NAME_LABEL, SELF_SET, Manifest, metadata, mig_resource
from gpuplex.kube.self_options import SelfOptions
from gpuplex.kube.self_pods import ALL_INTERFACES, RUN_AS, TMP, restricted_container
from gpuplex.kube.self_scheduling import pod_scheduling

EXTENDER = "gpuplex-scheduler-extender"
EXTENDER_PORT = 8890
CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/etc/gpuplex-scheduler"
#: the extender's priorities (0..10) count this many times kube-scheduler's own, in `score` mode
SCORE_WEIGHT = 5
#: kube-scheduler gives up on a call after this long (then skips the extender: it is ignorable)
HTTP_TIMEOUT = "5s"
KUBE_SCHEDULER_SECURE_PORT = 10259


def scheduler_manifests(spec: GpuplexSpec, options: SelfOptions) -> list[Manifest]:
    """The second scheduler's and the extender's objects; none without `kubernetes.scheduler`."""
    scheduler = spec.kubernetes.scheduler
    if scheduler is None:
        return []
    namespace = spec.kubernetes.system_namespace
    config = scheduler_config(spec, scheduler, f"http://{EXTENDER}.{namespace}.svc:{EXTENDER_PORT}")
    return [
        *_service_accounts(namespace, scheduler),
        *_scheduler_rbac(namespace, scheduler),
        *_extender_rbac(namespace),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(scheduler.name, namespace=namespace, set_name=SELF_SET),
            "data": {CONFIG_KEY: yaml.safe_dump(config, sort_keys=False)},
        },
        _scheduler_deployment(namespace, scheduler, options),
        _extender_deployment(namespace, scheduler, options),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(EXTENDER, namespace=namespace, set_name=SELF_SET),
            "spec": {
                "selector": {NAME_LABEL: EXTENDER},
                "ports": [{"name": "http", "port": EXTENDER_PORT, "targetPort": EXTENDER_PORT}],
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(EXTENDER, namespace=namespace, set_name=SELF_SET),
            "spec": {
                "podSelector": {"matchLabels": {NAME_LABEL: EXTENDER}},
                "policyTypes": ["Ingress"],
                "ingress": [
                    {
                        "from": [{"podSelector": {"matchLabels": {NAME_LABEL: scheduler.name}}}],
                        "ports": [{"protocol": "TCP", "port": EXTENDER_PORT}],
                    }
                ],
            },
        },
    ]


def managed_resources(spec: GpuplexSpec) -> list[str]:
    """The resources whose pods kube-scheduler sends to the extender: whole GPUs, and the MIG
    profiles of the fleet's GPU models (a MIG resource name per profile, as the device plugin's
    mixed strategy advertises them)."""
    names = {GPU_RESOURCE}
    for node in spec.fleet.nodes:
        for group in node.gpus:
            model = spec.fleet.catalog.model(str(group.model))
            if model is not None and model.mig is not None:
                names.update(mig_resource(p.name) for p in model.mig.profiles)
    return sorted(names)


def scheduler_config(spec: GpuplexSpec, scheduler: SchedulerSpec, url: str) -> dict[str, Any]:
    """The second scheduler's KubeSchedulerConfiguration, calling the extender at `url`."""
    extender: dict[str, Any] = {"urlPrefix": url}
    if scheduler.mode == "decide":
        extender["filterVerb"] = "filter"
    else:
        extender |= {"prioritizeVerb": "prioritize", "weight": SCORE_WEIGHT}
    extender |= {
        "enableHTTPS": False,
        "httpTimeout": HTTP_TIMEOUT,
        "nodeCacheCapable": True,
        "ignorable": True,
        "managedResources": [
            {"name": name, "ignoredByScheduler": False} for name in managed_resources(spec)
        ],
    }
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {
            "leaderElect": True,
            "resourceName": scheduler.name,
            "resourceNamespace": spec.kubernetes.system_namespace,
        },
        "profiles": [{"schedulerName": scheduler.name}],
        "extenders": [extender],
    }


def _service_accounts(namespace: str, scheduler: SchedulerSpec) -> list[Manifest]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(name, namespace=namespace, set_name=SELF_SET),
        }
        for name in (scheduler.name, EXTENDER)
    ]


def _binding(
    kind: str, name: str, role_kind: str, role: str, account: str, namespace: str
) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata(
            name, namespace=namespace if kind == "RoleBinding" else None, set_name=SELF_SET
        ),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def _scheduler_rbac(namespace: str, scheduler: SchedulerSpec) -> list[Manifest]:
    """What a second kube-scheduler needs (Kubernetes' "Configure Multiple Schedulers"): the
    built-in scheduler roles, reading the authentication ConfigMap in kube-system, and its own
    leader-election Lease."""
    name = scheduler.name
    lease_role = f"{name}-leader-election"
    return [
        _binding(
            "ClusterRoleBinding", name, "ClusterRole", "system:kube-scheduler", name, namespace
        ),
        _binding(
            "ClusterRoleBinding",
            f"{name}-volumes",
            "ClusterRole",
            "system:volume-scheduler",
            name,
            namespace,
        ),
        {
            **_binding(
                "RoleBinding",
                f"{name}-authentication-reader",
                "Role",
                "extension-apiserver-authentication-reader",
                name,
                namespace,
            ),
            "metadata": metadata(
                f"{name}-authentication-reader", namespace="kube-system", set_name=SELF_SET
            ),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(lease_role, namespace=namespace, set_name=SELF_SET),
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
        _binding("RoleBinding", lease_role, "Role", lease_role, name, namespace),
    ]


def _extender_rbac(namespace: str) -> list[Manifest]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata(EXTENDER, set_name=SELF_SET),
            "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
        },
        _binding("ClusterRoleBinding", EXTENDER, "ClusterRole", EXTENDER, EXTENDER, namespace),
    ]


def _deployment(
    namespace: str, name: str, options: SelfOptions, container: dict[str, Any], volumes: list[Any]
) -> Manifest:
    pod: dict[str, Any] = {
        "serviceAccountName": name,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{**container, "securityContext": restricted_container()}],
        "volumes": volumes,
        **pod_scheduling(options.node_selector, options.tolerations),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, namespace=namespace, set_name=SELF_SET),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {NAME_LABEL: name}},
            "template": {"metadata": {"labels": {NAME_LABEL: name}}, "spec": pod},
        },
    }


def _scheduler_deployment(
    namespace: str, scheduler: SchedulerSpec, options: SelfOptions
) -> Manifest:
    probe = {
        "httpGet": {"path": "/healthz", "port": KUBE_SCHEDULER_SECURE_PORT, "scheme": "HTTPS"},
        "initialDelaySeconds": 10,
    }
    container = {
        "name": "kube-scheduler",
        "image": scheduler.kube_scheduler_image,
        "command": ["kube-scheduler", f"--config={CONFIG_DIR}/{CONFIG_KEY}"],
        "livenessProbe": probe,
        "readinessProbe": {"httpGet": probe["httpGet"]},
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": TMP},
        ],
    }
    volumes = [
        {"name": "config", "configMap": {"name": scheduler.name}},
        {"name": "tmp", "emptyDir": {}},
    ]
    return _deployment(namespace, scheduler.name, options, container, volumes)


def _extender_deployment(
    namespace: str, scheduler: SchedulerSpec, options: SelfOptions
) -> Manifest:
    command = [
        "gpuplex",
        "kube",
        "extender",
        "--host",
        ALL_INTERFACES,
        "--port",
        str(EXTENDER_PORT),
    ]
    probe = {"httpGet": {"path": "/healthz", "port": EXTENDER_PORT}}
    container = {
        "name": "extender",
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": [*command, "--policy", scheduler.policy],
        "env": [{"name": "HOME", "value": TMP}],
        "ports": [{"name": "http", "containerPort": EXTENDER_PORT}],
        "livenessProbe": probe,
        "readinessProbe": probe,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "tmp", "mountPath": TMP}],
    }
    return _deployment(namespace, EXTENDER, options, container, [{"name": "tmp", "emptyDir": {}}])
