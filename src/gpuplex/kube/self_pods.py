"""gpuplex's own pods: the server (`gpuplex server`) and the gateway (`gpuplex gateway`) as
Deployments, their Services, and the gateway's HorizontalPodAutoscaler.

Both run as an unprivileged user on a read-only root filesystem (the gateway refuses root anyway);
what they write goes to emptyDirs: /tmp, and the gateway's usage spool and worker metrics. The spec
is a ConfigMap file; a hash of it on the pod template rolls the pods when it changes, since neither
process rereads it.
"""

from __future__ import annotations

import math
from typing import Any

from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import COMPONENT_LABEL, NAME_LABEL, SELF_SET, Manifest, labels, metadata
from gpuplex.kube.self_options import SelfOptions
from gpuplex.kube.self_scheduling import pod_scheduling

SERVER = "gpuplex-server"
GATEWAY = "gpuplex-gateway"
SERVER_PORT = 8090  # `gpuplex server`'s default; the gateway's port is the spec's gateway.port
SPEC_CONFIGMAP = "gpuplex-spec"
SPEC_KEY = "gpuplex.yaml"
SPEC_PATH = "/etc/gpuplex/gpuplex.yaml"
#: The gateway's spool lives here; its worker metrics go beside it (spool_dir.parent).
GATEWAY_STATE = "/var/lib/gpuplex/gateway"
SPEC_HASH_ANNOTATION = "gpuplex.dev/spec-sha256"
RUN_AS = 1000
#: A pod has its own network namespace: listening on all of it is how a Service reaches the pod.
ALL_INTERFACES = "0.0.0.0"  # noqa: S104
#: The pod's own emptyDir, not a shared host directory.
TMP = "/tmp"  # noqa: S108
#: Seconds a stopping gateway pod gets beyond the longest upstream answer: the usage mover's last
#: pass into the store, which must finish before the emptyDir spool goes away.
GATEWAY_STOP_MARGIN_S = 30


def app_labels(name: str, component: str) -> dict[str, str]:
    """What the Services, ServiceMonitors and the tenants' NetworkPolicies select these pods by."""
    return {NAME_LABEL: name, COMPONENT_LABEL: component}


def services(spec: GpuplexSpec, options: SelfOptions) -> list[Manifest]:
    namespace = spec.kubernetes.system_namespace
    gateway_spec: dict[str, Any] = {
        "type": options.gateway_service_type,
        "selector": {NAME_LABEL: GATEWAY},
        "ports": [_service_port(spec.gateway.port)],
    }
    if options.gateway_service_type != "ClusterIP":
        # Keep the client's own address: per-address failed-auth limits and the /metrics networks
        # would otherwise see a node's address for every outside caller.
        gateway_spec["externalTrafficPolicy"] = "Local"
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(SERVER, namespace, "server"),
            "spec": {
                "type": "ClusterIP",
                "selector": {NAME_LABEL: SERVER},
                "ports": [_service_port(SERVER_PORT)],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(GATEWAY, namespace, "gateway"),
            "spec": gateway_spec,
        },
    ]


def server_deployment(
    spec: GpuplexSpec, options: SelfOptions, spec_sha256: str, dcgm_urls: list[str]
) -> Manifest:
    command = ["gpuplex", "server", "--spec", SPEC_PATH, "--host", ALL_INTERFACES]
    command += ["--port", str(SERVER_PORT)]
    for network in options.metrics_from:
        command += ["--metrics-from", network]
    env = [
        _secret_env("GPUPLEX_STORE_URL", options.store_secret, options.store_secret_key),
        {"name": "GPUPLEX_DCGM_URLS", "value": ",".join(dcgm_urls)},
        metrics_token_env(options),
        {"name": "HOME", "value": TMP},
    ]
    container = _container(SERVER, options, command, env, SERVER_PORT, "/healthz")
    container["resources"] = _resources(options.server_cpu, options.server_memory)
    pod = _pod_spec(SERVER, options, [container], [])
    pod["automountServiceAccountToken"] = True  # it reconciles the cluster through the API
    return _deployment(spec, SERVER, "server", options.server_replicas, pod, spec_sha256)


def gateway_deployment(spec: GpuplexSpec, options: SelfOptions, spec_sha256: str) -> Manifest:
    command = ["gpuplex", "gateway", "--config", SPEC_PATH, "--spool-dir", f"{GATEWAY_STATE}/spool"]
    env = [
        _secret_env("GPUPLEX_STORE_URL", options.store_secret, options.store_secret_key),
        _secret_env("GPUPLEX_REDIS_URL", options.redis_secret, options.redis_secret_key),
        metrics_token_env(options),
        {"name": "HOME", "value": TMP},
    ]
    # Ready only while it can record usage (`/healthz`: a full spool refuses every request);
    # alive as long as it answers at all (`/health`): restarting would not free the disk.
    container = _container(
        GATEWAY, options, command, env, spec.gateway.port, "/health", ready_path="/healthz"
    )
    container["resources"] = _resources(options.gateway_cpu, options.gateway_memory)
    container["volumeMounts"].append({"name": "state", "mountPath": GATEWAY_STATE})
    state = {"name": "state", "emptyDir": {"sizeLimit": options.spool_size}}
    pod = _pod_spec(GATEWAY, options, [container], [state])
    pod["automountServiceAccountToken"] = False  # it never talks to the Kubernetes API
    pod["terminationGracePeriodSeconds"] = (
        math.ceil(spec.gateway.upstream_timeout_s) + GATEWAY_STOP_MARGIN_S
    )
    pod["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {NAME_LABEL: GATEWAY}},
        }
    ]
    replicas = None if options.gateway_autoscale else options.gateway_replicas
    deployment = _deployment(spec, GATEWAY, "gateway", replicas, pod, spec_sha256)
    deployment["spec"]["strategy"] = {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    return deployment


def gateway_autoscaler(spec: GpuplexSpec, options: SelfOptions) -> Manifest:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(GATEWAY, spec.kubernetes.system_namespace, "gateway"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": GATEWAY},
            "minReplicas": options.gateway_min_replicas,
            "maxReplicas": options.gateway_max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": options.gateway_target_cpu_percent,
                        },
                    },
                }
            ],
        },
    }


def restricted_container() -> dict[str, Any]:
    """A container's securityContext under the `restricted` Pod Security Standard, which the
    system namespace enforces, on a read-only root filesystem."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _meta(name: str, namespace: str, component: str) -> dict[str, Any]:
    return metadata(
        name, namespace=namespace, set_name=SELF_SET, extra_labels=app_labels(name, component)
    )


def _service_port(port: int) -> dict[str, Any]:
    return {"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}


def metrics_token_env(options: SelfOptions) -> dict[str, Any]:
    """$GPUPLEX_METRICS_TOKEN from the operator's Secret: the token /metrics asks for."""
    return _secret_env("GPUPLEX_METRICS_TOKEN", options.metrics_secret, options.metrics_secret_key)


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _resources(cpu: str, memory: str) -> dict[str, Any]:
    """CPU is requested, not limited (a limit throttles a proxy's tail latency); memory is both."""
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}}


def _container(
    name: str,
    options: SelfOptions,
    command: list[str],
    env: list[dict[str, Any]],
    port: int,
    health_path: str,
    ready_path: str | None = None,
) -> dict[str, Any]:
    def probe(period_s: int, failures: int, path: str = health_path) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": "http"},
            "periodSeconds": period_s,
            "timeoutSeconds": min(period_s, 5),
            "failureThreshold": failures,
        }

    return {
        "name": name.removeprefix("gpuplex-"),
        "image": options.image,
        "imagePullPolicy": options.image_pull_policy,
        "command": command,
        "env": env,
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        # Starting opens the store and, for the server, applies the spec: up to two minutes.
        "startupProbe": probe(3, 40),
        "readinessProbe": probe(10, 2, ready_path or health_path),
        "livenessProbe": probe(10, 6),
        "securityContext": restricted_container(),
        "volumeMounts": [
            # subPath: the file never changes under a running process (a rollout replaces it),
            # and resolving its path finds the file itself, not a kubelet symlink that goes away.
            {"name": "spec", "mountPath": SPEC_PATH, "subPath": SPEC_KEY, "readOnly": True},
            {"name": "tmp", "mountPath": TMP},
        ],
    }


def _pod_spec(
    name: str,
    options: SelfOptions,
    containers: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "serviceAccountName": name,
        **pod_scheduling(options.node_selector, options.tolerations),
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": [
            {"name": "spec", "configMap": {"name": SPEC_CONFIGMAP}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
            *volumes,
        ],
    }


def _deployment(
    spec: GpuplexSpec,
    name: str,
    component: str,
    replicas: int | None,
    pod: dict[str, Any],
    spec_sha256: str,
) -> Manifest:
    body: dict[str, Any] = {}
    if replicas is not None:
        body["replicas"] = replicas
    body["selector"] = {"matchLabels": {NAME_LABEL: name}}
    body["template"] = {
        "metadata": {
            "labels": {**labels(set_name=SELF_SET), **app_labels(name, component)},
            "annotations": {SPEC_HASH_ANNOTATION: spec_sha256},
        },
        "spec": pod,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, spec.kubernetes.system_namespace, component),
        "spec": body,
    }
