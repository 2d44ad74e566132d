"""Prometheus scraping of gpuplex in the cluster: ServiceMonitors (Prometheus operator) for the
server's and the gateway's /metrics (with the metrics token from a Secret) and for NVIDIA's
dcgm-exporter, and the exporter's URL that the server reads GPU samples from for metering.

The GPU operator's dcgm-exporter Service is `nvidia-dcgm-exporter` in its namespace, labelled
`app: nvidia-dcgm-exporter`, port `gpu-metrics` (9400).
"""

from __future__ import annotations

from typing import Any

from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import SELF_SET, Manifest, metadata
from gpuplex.kube.self_options import SelfOptions
from gpuplex.kube.self_pods import GATEWAY, SERVER, app_labels

MONITORING_API = "monitoring.coreos.com/v1"


def dcgm_namespace(spec: GpuplexSpec, options: SelfOptions) -> str:
    return options.dcgm_namespace or spec.kubernetes.gpu_operator_namespace


#: A headless Service over the exporter's pods, rendered by gpuplex beside the GPU operator's own.
DCGM_HEADLESS_SERVICE = "gpuplex-dcgm-exporter"


def dcgm_urls(spec: GpuplexSpec, options: SelfOptions) -> list[str]:
    """What the server scrapes (env GPUPLEX_DCGM_URLS): the headless Service over every exporter
    pod. The GPU operator's own Service has a cluster IP that answers each read from one pod, that
    is one GPU node; the headless name resolves to every pod, and the scraper reads each address."""
    namespace = dcgm_namespace(spec, options)
    return [f"http://{DCGM_HEADLESS_SERVICE}.{namespace}.svc:{options.dcgm_port}/metrics"]


def dcgm_headless_service(spec: GpuplexSpec, options: SelfOptions) -> Manifest:
    """`clusterIP: None` over the pods the exporter's Service selects: DNS gives one address per
    exporter pod (one per GPU node)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(
            DCGM_HEADLESS_SERVICE, namespace=dcgm_namespace(spec, options), set_name=SELF_SET
        ),
        "spec": {
            "clusterIP": "None",
            "selector": {"app": options.dcgm_service},
            "ports": [
                {
                    "name": options.dcgm_port_name,
                    "port": options.dcgm_port,
                    "targetPort": options.dcgm_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def service_monitors(spec: GpuplexSpec, options: SelfOptions) -> list[Manifest]:
    """The server's and the gateway's send the metrics token from the operator's Secret (in the
    ServiceMonitors' namespace, which is theirs): without it /metrics answers 401."""
    namespace = spec.kubernetes.system_namespace
    with_token = {"port": "http", "authorization": _bearer_from_secret(options)}
    return [
        _monitor(
            spec,
            options,
            SERVER,
            selector=app_labels(SERVER, "server"),
            namespace=namespace,
            endpoint=with_token,
        ),
        _monitor(
            spec,
            options,
            GATEWAY,
            selector=app_labels(GATEWAY, "gateway"),
            namespace=namespace,
            endpoint=with_token,
        ),
        _monitor(
            spec,
            options,
            "gpuplex-dcgm-exporter",
            selector={"app": options.dcgm_service},
            namespace=dcgm_namespace(spec, options),
            # The exporter's own `namespace`/`pod`/`container` labels name the pod using the GPU;
            # without honorLabels Prometheus would overwrite them with the exporter pod's.
            endpoint={"port": options.dcgm_port_name, "honorLabels": True},
        ),
    ]


def _bearer_from_secret(options: SelfOptions) -> dict[str, Any]:
    return {
        "type": "Bearer",
        "credentials": {"name": options.metrics_secret, "key": options.metrics_secret_key},
    }


def _monitor(
    spec: GpuplexSpec,
    options: SelfOptions,
    name: str,
    *,
    selector: dict[str, str],
    namespace: str,
    endpoint: dict[str, Any],
) -> Manifest:
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": metadata(
            name,
            namespace=spec.kubernetes.system_namespace,
            set_name=SELF_SET,
            extra_labels=dict(sorted(options.monitor_labels.items())),
        ),
        "spec": {
            "selector": {"matchLabels": selector},
            "namespaceSelector": {"matchNames": [namespace]},
            "endpoints": [{**endpoint, "path": "/metrics", "interval": options.scrape_interval}],
        },
    }
