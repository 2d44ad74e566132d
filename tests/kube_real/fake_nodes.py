"""Fake GPU Nodes for the real control plane: Node objects with the capacities and labels that the
NVIDIA device plugin and GPU feature discovery would publish once they ran the configs gpuplex
rendered for each node. No kubelet runs: the scheduler binds pods to these nodes and they stay
Pending there.

What each node advertises follows from the rendered ConfigMaps alone, as on a real cluster:
- the MIG manager's layout (`nvidia.com/mig.config`) makes `nvidia.com/mig-<profile>` per slice,
  and the GPUs it MIG-enables are no longer whole GPUs;
- the device plugin's config (`nvidia.com/device-plugin.config`) shares every remaining GPU by
  MPS or time-slicing `replicas` times as `nvidia.com/gpu.shared` (renameByDefault), or
  advertises it whole as `nvidia.com/gpu`; GPU feature discovery labels the strategy.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.kueue_flavors import GPU_PRODUCT_LABEL, gfd_product
from gpuplex.kube.naming import SHARING_STRATEGY_LABEL, Manifest
from gpuplex.kube.node_config import DEVICE_PLUGIN_CONFIGMAP, MIG_PARTED_CONFIGMAP, MIG_PARTED_KEY

PLUGIN_LABEL = "nvidia.com/device-plugin.config"
MIG_LABEL = "nvidia.com/mig.config"


def fake_nodes(spec: GpuplexSpec, manifests: list[Manifest]) -> list[tuple[Manifest, Manifest]]:
    """(Node to create, its status) for every fleet node the rendered set labels."""
    maps = {
        m["metadata"]["name"]: m["data"]
        for m in manifests
        if m["kind"] == "ConfigMap"
        and m["metadata"]["name"] in (DEVICE_PLUGIN_CONFIGMAP, MIG_PARTED_CONFIGMAP)
    }
    plugin = {name: yaml.safe_load(text) for name, text in maps[DEVICE_PLUGIN_CONFIGMAP].items()}
    layouts = yaml.safe_load(maps[MIG_PARTED_CONFIGMAP][MIG_PARTED_KEY])["mig-configs"]
    fleet = {node.name: node for node in spec.fleet.nodes}
    out = []
    for manifest in manifests:
        if manifest["kind"] != "Node":
            continue
        name = manifest["metadata"]["name"]
        labels = manifest["metadata"]["labels"]
        node = fleet[name]
        gpus = sum(group.count for group in node.gpus)
        capacity, strategy = _gpu_capacity(
            gpus, layouts[labels[MIG_LABEL]], plugin[labels[PLUGIN_LABEL]]
        )
        capacity.update(
            {"cpu": str(node.cpu_cores), "memory": f"{node.memory_gib}Gi", "pods": "110"}
        )
        node_object = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    GPU_PRODUCT_LABEL: _product(spec, str(node.gpus[0].model)),
                    "nvidia.com/gpu.count": str(gpus),
                    SHARING_STRATEGY_LABEL: strategy,
                },
            },
        }
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node: no kubelet runs",
                    }
                ],
            }
        }
        out.append((node_object, status))
    return out


def _product(spec: GpuplexSpec, model_name: str) -> str:
    """GPU feature discovery's product label for the model (its NVML name, spaces as `-`)."""
    model = spec.fleet.catalog.model(model_name)
    product = gfd_product(model.nvml_names) if model is not None else None
    return product or model_name


def _gpu_capacity(
    gpus: int, layout: list[dict[str, Any]], plugin: dict[str, Any]
) -> tuple[dict[str, str], str]:
    counts: Counter[str] = Counter()
    mig_gpus = 0
    for group in layout:
        if not group.get("mig-enabled"):
            continue
        devices = gpus if group["devices"] == "all" else len(group["devices"])
        mig_gpus += devices
        for profile, per_gpu in (group.get("mig-devices") or {}).items():
            counts[f"nvidia.com/mig-{profile}"] += per_gpu * devices
    whole = gpus - mig_gpus
    sharing = plugin.get("sharing") or {}
    if "mps" in sharing or "timeSlicing" in sharing:
        method = sharing.get("mps") or sharing["timeSlicing"]
        counts["nvidia.com/gpu.shared"] = whole * int(method["resources"][0]["replicas"])
        strategy = "mps" if "mps" in sharing else "time-slicing"
    else:
        counts["nvidia.com/gpu"] = whole
        strategy = "none"
    return {resource: str(count) for resource, count in counts.items()}, strategy
