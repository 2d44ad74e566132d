"""Hand-written manifests for the apply tests: small, but each kind's real shape, labelled the
way the renderers label them (so these tests do not depend on the renderers)."""

from __future__ import annotations

from typing import Any

from gpuplex.kube.naming import PLAN_SET, SELF_SET, Manifest, metadata

NS = "gpuplex-acme"


def namespace(name: str = NS, set_name: str = PLAN_SET) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": metadata(name, set_name=set_name, tenant="acme"),
    }


def config_map(name: str, data: dict[str, str], namespace: str = NS) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, namespace=namespace),
        "data": data,
    }


def priority_class(value: int = 100_100) -> Manifest:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": metadata("gpuplex-priority-100"),
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
    }


def node(name: str = "gpu-a", pool: str = "serve") -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata(name, extra_labels={f"pool.gpuplex.dev/{pool}": "true"}),
        "spec": {"taints": [{"key": "gpuplex.dev/pool", "value": pool, "effect": "NoSchedule"}]},
    }


def live_node(name: str = "gpu-a") -> Manifest:
    """A Node as the kubelet registers it, before gpuplex labels it."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }


def deployment(name: str = "chat", replicas: int = 2, namespace: str = NS) -> Manifest:
    labels = {"app.kubernetes.io/name": name}
    container: dict[str, Any] = {
        "name": "model",
        "image": "vllm/vllm-openai:v0.6.4",
        "resources": {
            "requests": {"nvidia.com/mig-3g.40gb": "1"},
            "limits": {"nvidia.com/mig-3g.40gb": "1"},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name, namespace=namespace, tenant="acme", workload=name),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def service_monitor(namespace: str = NS, set_name: str = SELF_SET) -> Manifest:
    """A ServiceMonitor: only gpuplex's own set renders them."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata("gpuplex-server", namespace=namespace, set_name=set_name),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "gpuplex-server"}},
            "endpoints": [{"port": "http", "path": "/metrics"}],
        },
    }


def plan_set() -> list[Manifest]:
    """In render order: the namespace after a cluster-scoped object and the Node, so the apply
    order is gpuplex's doing, not the list's."""
    return [
        priority_class(),
        node(),
        namespace(),
        config_map("gpuplex-settings", {"mode": "mig"}),
        deployment(),
    ]


def example_cluster(put: Any, spec_path: Any) -> None:
    """What a real cluster has before gpuplex, for the spec at `spec_path`: its GPU nodes and the
    GPU operator's namespace (`put` seeds one object, as FakeKubeApi.put does)."""
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(spec_path)
    for fleet_node in spec.fleet.nodes:
        put(live_node(fleet_node.name))
    put(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": spec.kubernetes.gpu_operator_namespace},
        }
    )
