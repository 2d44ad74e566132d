"""How gpuplex's own server and gateway run in the cluster (`gpuplex kube render --self`): image,
replica counts, autoscaling, resources, which nodes they may run on, which Secrets hold the
connection URLs, where DCGM is.

The URLs themselves (PostgreSQL with its password, Redis) never appear here nor in any rendered
object: the options name the Secrets, and the pods read them through `secretKeyRef`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from gpuplex import __version__
from gpuplex.errors import KubeRenderError
from gpuplex.kube.self_scheduling import scheduling_problems

DEFAULT_IMAGE = f"registry.local/gpuplex/gpuplex:{__version__}"

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")

_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$")
_DURATION = re.compile(r"^[0-9]+(ms|s|m|h)$")


@dataclass(frozen=True, slots=True)
class SelfOptions:
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    server_replicas: int = 1
    #: The gateway's fixed replica count when `gateway_autoscale` is off; with it on, the
    #: HorizontalPodAutoscaler owns the count and the Deployment leaves `replicas` out.
    gateway_replicas: int = 2
    gateway_autoscale: bool = True
    gateway_min_replicas: int = 2
    gateway_max_replicas: int = 10
    gateway_target_cpu_percent: int = 70
    #: ClusterIP: reached through an Ingress or Gateway the operator adds; NodePort/LoadBalancer
    #: keep the client's address (externalTrafficPolicy Local) for per-address limits.
    gateway_service_type: str = "ClusterIP"
    server_cpu: str = "250m"
    server_memory: str = "512Mi"
    gateway_cpu: str = "500m"
    gateway_memory: str = "1Gi"
    #: The gateway's usage spool (emptyDir): it survives container restarts, and the mover empties
    #: it into the store when the pod stops.
    spool_size: str = "1Gi"
    #: Labels a node must have to run the server and gateway pods (their `nodeSelector`).
    node_selector: dict[str, str] = field(default_factory=dict)
    #: Taints the server and gateway pods tolerate, as `kubectl taint` writes them:
    #: `KEY[=VALUE][:EFFECT]`, e.g. `gpuplex.dev/pool=serving:NoSchedule` for the pool's nodes.
    tolerations: tuple[str, ...] = ()
    #: Names of Secrets and keys, never their contents.
    store_secret: str = "gpuplex-store"  # noqa: S105
    store_secret_key: str = "url"  # noqa: S105
    redis_secret: str = "gpuplex-redis"  # noqa: S105
    redis_secret_key: str = "url"  # noqa: S105
    #: The bearer token that reads the server's and the gateway's /metrics: both pods get it as
    #: $GPUPLEX_METRICS_TOKEN, and the ServiceMonitors send it (`authorization`).
    metrics_secret: str = "gpuplex-metrics"  # noqa: S105
    metrics_secret_key: str = "token"  # noqa: S105
    dcgm_service: str = "nvidia-dcgm-exporter"
    #: None: `kubernetes.gpu_operator_namespace`, where the GPU operator runs dcgm-exporter.
    dcgm_namespace: str | None = None
    dcgm_port: int = 9400
    dcgm_port_name: str = "gpu-metrics"
    scrape_interval: str = "30s"
    #: Networks that read the server's and the gateway's /metrics without a token: none by
    #: default (tenant pods share the pod network); Prometheus sends the metrics token.
    metrics_from: tuple[str, ...] = ()
    #: Extra labels on the ServiceMonitors, e.g. `release: kube-prometheus-stack`, which that
    #: chart's Prometheus selects by.
    monitor_labels: dict[str, str] = field(default_factory=dict)


def check_options(options: SelfOptions) -> None:
    """Every bad option at once, as a KubeRenderError, before anything is rendered."""
    problems = [
        *_count_problems(options),
        *_name_problems(options),
        *_value_problems(options),
        *scheduling_problems(options.node_selector, options.tolerations),
    ]
    if problems:
        raise KubeRenderError("self-hosting options: " + "; ".join(problems))


def _count_problems(o: SelfOptions) -> list[str]:
    problems = []
    for name, value in (
        ("server replicas", o.server_replicas),
        ("gateway replicas", o.gateway_replicas),
        ("gateway minimum replicas", o.gateway_min_replicas),
        ("gateway target CPU percent", o.gateway_target_cpu_percent),
    ):
        if value < 1:
            problems.append(f"{name} is {value}: give at least 1")
    if o.gateway_max_replicas < o.gateway_min_replicas:
        problems.append(
            f"gateway maximum replicas {o.gateway_max_replicas} is below the minimum "
            f"{o.gateway_min_replicas}"
        )
    if not 1 <= o.dcgm_port <= 65535:
        problems.append(f"DCGM exporter port {o.dcgm_port} is not between 1 and 65535")
    return problems


def _name_problems(o: SelfOptions) -> list[str]:
    problems = []
    for what, name in (
        ("store Secret", o.store_secret),
        ("Redis Secret", o.redis_secret),
        ("metrics Secret", o.metrics_secret),
    ):
        if not _DNS_SUBDOMAIN.match(name):
            problems.append(f"{what} {name!r} is not a Kubernetes object name")
    for what, key in (
        ("store Secret key", o.store_secret_key),
        ("Redis key", o.redis_secret_key),
        ("metrics Secret key", o.metrics_secret_key),
    ):
        if not _SECRET_KEY.match(key):
            problems.append(f"{what} {key!r} is not a Secret key (letters, digits, -._)")
    if not _DNS_LABEL.match(o.dcgm_service):
        problems.append(f"DCGM exporter Service {o.dcgm_service!r} is not a Service name")
    if o.dcgm_namespace is not None and not _DNS_LABEL.match(o.dcgm_namespace):
        problems.append(f"DCGM exporter namespace {o.dcgm_namespace!r} is not a namespace name")
    if not _PORT_NAME.match(o.dcgm_port_name):
        problems.append(f"DCGM exporter port name {o.dcgm_port_name!r} is not a port name")
    return problems


def _value_problems(o: SelfOptions) -> list[str]:
    problems = []
    if not o.image.strip():
        problems.append("the image is empty")
    if o.image_pull_policy not in ("Always", "IfNotPresent", "Never"):
        problems.append(f"image pull policy {o.image_pull_policy!r}: Always, IfNotPresent or Never")
    if o.gateway_service_type not in SERVICE_TYPES:
        problems.append(
            f"gateway Service type {o.gateway_service_type!r}: one of {', '.join(SERVICE_TYPES)}"
        )
    for what, quantity in (
        ("server CPU", o.server_cpu),
        ("server memory", o.server_memory),
        ("gateway CPU", o.gateway_cpu),
        ("gateway memory", o.gateway_memory),
        ("spool size", o.spool_size),
    ):
        if not _QUANTITY.match(quantity):
            problems.append(f"{what} {quantity!r} is not a quantity like 500m, 2 or 512Mi")
    if not _DURATION.match(o.scrape_interval):
        problems.append(f"scrape interval {o.scrape_interval!r} is not a duration like 30s")
    for network in o.metrics_from:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            problems.append(f"metrics network {network!r} is not a network like 10.0.0.0/8")
    return problems
