"""`gpuplex kube render --self`: gpuplex's own server and gateway as Kubernetes objects, in
`kubernetes.system_namespace`, labelled `gpuplex.dev/set: self` so that pruning the tenants' objects
never touches them (and the other way round).

Rendered: the Namespace, ServiceAccounts, the server's ClusterRole and binding (it may apply what
`gpuplex kube apply` applies), the spec as a ConfigMap (the gateway reaching the model servers
through their Services), the server and gateway Deployments with Services, the gateway's
autoscaler, and ServiceMonitors. Not rendered: the Secrets holding the store and Redis URLs, which
the operator creates so that no password is ever written into a manifest.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.gateway import LimiterBackend
from gpuplex.kube.api import access_needed
from gpuplex.kube.naming import PLAN_SET, SELF_SET, Manifest, kubernetes_backends, metadata
from gpuplex.kube.self_monitoring import dcgm_headless_service, dcgm_urls, service_monitors
from gpuplex.kube.self_options import SelfOptions, check_options
from gpuplex.kube.self_pods import (
    ALL_INTERFACES,
    GATEWAY,
    SERVER,
    SPEC_CONFIGMAP,
    SPEC_KEY,
    gateway_autoscaler,
    gateway_deployment,
    server_deployment,
    services,
)
from gpuplex.kube.self_scheduler import scheduler_manifests

__all__ = ["SelfOptions", "self_manifests", "spec_text"]

RECONCILER_ROLE = "gpuplex-server-reconciler"


def self_manifests(spec: GpuplexSpec, options: SelfOptions) -> list[Manifest]:
    """Every object of the self set, in apply order. Raises KubeRenderError for bad options."""
    check_options(options)
    text = spec_text(spec, options)
    sha256 = hashlib.sha256(text.encode()).hexdigest()
    manifests = [
        _namespace(spec),
        *_service_accounts(spec),
        *_reconciler_rbac(spec),
        _spec_configmap(spec, text),
        *services(spec, options),
        dcgm_headless_service(spec, options),
        server_deployment(spec, options, sha256, dcgm_urls(spec, options)),
        gateway_deployment(spec, options, sha256),
    ]
    if options.gateway_autoscale:
        manifests.append(gateway_autoscaler(spec, options))
    manifests.extend(service_monitors(spec, options))
    manifests.extend(scheduler_manifests(spec, options))
    return manifests


def spec_text(spec: GpuplexSpec, options: SelfOptions) -> str:
    """The spec the pods read: the operator's, with the gateway listening on the pod's address,
    reaching each served workload through its Service, sharing its limits in Redis across
    replicas, and serving /metrics to the networks Prometheus scrapes from."""
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_defaults=True)
    gateway: dict[str, Any] = data.setdefault("gateway", {})
    gateway["host"] = ALL_INTERFACES
    gateway["limiter"] = LimiterBackend.REDIS.value
    gateway["backends"] = kubernetes_backends(spec)
    gateway["metrics_from"] = list(options.metrics_from)
    # kept even when all defaults: its presence is what makes the server plan for Kubernetes
    data.setdefault("kubernetes", {})
    return yaml.safe_dump({"version": spec.version, **data}, sort_keys=False)


def _namespace(spec: GpuplexSpec) -> Manifest:
    """gpuplex's pods meet the `restricted` Pod Security Standard, so the namespace enforces it."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(
            spec.kubernetes.system_namespace,
            set_name=SELF_SET,
            extra_labels={
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
            },
        ),
    }


def _service_accounts(spec: GpuplexSpec) -> list[Manifest]:
    """One each, so the server's API rights never reach the gateway, which needs none."""
    namespace = spec.kubernetes.system_namespace
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": metadata(name, namespace=namespace, set_name=SELF_SET),
            "automountServiceAccountToken": name == SERVER,
        }
        for name in (SERVER, GATEWAY)
    ]


def _spec_configmap(spec: GpuplexSpec, text: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            SPEC_CONFIGMAP, namespace=spec.kubernetes.system_namespace, set_name=SELF_SET
        ),
        "data": {SPEC_KEY: text},
    }


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": list(verbs)}


def reconciler_rules() -> list[dict[str, Any]]:
    """What applying, diffing and pruning the plan set asks of the API (`access_needed`, derived
    from the requests the sync code makes), one rule per API group and set of verbs. The tenant
    Roles grant rights the server does not hold itself, so it may also `escalate` (write such
    Roles) and `bind` them; that makes this account a cluster administrator of tenant namespaces
    in effect, as the component that owns them. Nothing on gpuplex's own set: ClusterRoles,
    ServiceAccounts and the gateway stay the cluster admin's."""
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for (group, resource), verbs in sorted(access_needed(PLAN_SET).items()):
        grouped.setdefault((group, tuple(sorted(verbs))), []).append(resource)
    rules = [
        _rule([group], resources, list(verbs)) for (group, verbs), resources in grouped.items()
    ]
    rules.append(_rule(["rbac.authorization.k8s.io"], ["roles"], ["bind", "escalate"]))
    return rules


def _reconciler_rbac(spec: GpuplexSpec) -> list[Manifest]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata(RECONCILER_ROLE, set_name=SELF_SET),
            "rules": [
                {key: list(value) for key, value in rule.items()} for rule in reconciler_rules()
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata(RECONCILER_ROLE, set_name=SELF_SET),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": RECONCILER_ROLE,
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": SERVER,
                    "namespace": spec.kubernetes.system_namespace,
                }
            ],
        },
    ]
