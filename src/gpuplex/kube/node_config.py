"""Cluster GPU configuration from the plan: the NVIDIA device plugin's sharing configs, the MIG
manager's layouts, and the labels and taints that point each fleet node at its config and pools.

The GPU operator reads both ConfigMaps in its own namespace; each node picks its entries by the
labels `nvidia.com/device-plugin.config` and `nvidia.com/mig.config`. Configs are named after what
shares them: the node's pool when every node of the pool needs the same one, else the node itself;
a node that needs nothing special gets `default` (device plugin) or `all-disabled` (MIG), which are
also what nodes outside the fleet get.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import yaml

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.device_plugin import PLAIN_CONFIG, check_sharing, device_plugin_config
from gpuplex.kube.mig_parted import ALL_DISABLED, ALL_DISABLED_LAYOUT, mig_layout, mig_parted_config
from gpuplex.kube.naming import Manifest, metadata
from gpuplex.kube.nodes import NodeGpus, node_gpus, node_manifest, pool_override_notes
from gpuplex.kube.queue_slices import queue_mig_slices

DEVICE_PLUGIN_CONFIGMAP = "gpuplex-device-plugin-config"
MIG_PARTED_CONFIGMAP = "gpuplex-mig-parted-config"
#: The key the MIG manager reads its config from.
MIG_PARTED_KEY = "config.yaml"
#: The device-plugin config of nodes that share nothing and slice nothing; the operator's default
#: (`devicePlugin.config.default`) for nodes gpuplex does not label.
DEFAULT_CONFIG = "default"

_Content = TypeVar("_Content")


@dataclass(frozen=True)
class NodeConfig:
    manifests: list[Manifest]
    #: Where Kubernetes only approximates the plan: MPS replicas that the plugin's equal shares give
    #: less than planned, GPUs lent to another pool than their node's.
    notes: list[str]


def node_config(spec: GpuplexSpec, plan: Plan) -> NodeConfig:
    """The two GPU-operator ConfigMaps, then one partial Node object per fleet node (spec order).
    Raises KubeRenderError when some node's GPUs need sharing methods the device plugin cannot
    run side by side, naming every such node and what to change."""
    nodes = node_gpus(spec, plan)
    check_sharing(nodes)
    notes: list[str] = []
    plugin_configs: dict[str, dict[str, Any]] = {}
    for item in nodes:
        config, config_notes = device_plugin_config(item)
        plugin_configs[item.name] = config
        notes += config_notes
    slices = queue_mig_slices(spec, plan)
    layouts = {item.name: mig_layout(item, slices) for item in nodes}
    plugin_names, plugin_named = _name_configs(
        nodes, plugin_configs, DEFAULT_CONFIG, PLAIN_CONFIG, "device-plugin config"
    )
    layout_names, layouts_named = _name_configs(
        nodes, layouts, ALL_DISABLED, ALL_DISABLED_LAYOUT, "MIG layout"
    )
    namespace = spec.kubernetes.gpu_operator_namespace
    manifests: list[Manifest] = [
        _config_map(
            DEVICE_PLUGIN_CONFIGMAP,
            namespace,
            {name: _dump(plugin_named[name]) for name in sorted(plugin_named)},
        ),
        _config_map(
            MIG_PARTED_CONFIGMAP,
            namespace,
            {MIG_PARTED_KEY: _dump(mig_parted_config(layouts_named))},
        ),
    ]
    for item in nodes:
        manifests.append(
            node_manifest(
                spec,
                item.node,
                device_plugin_config=plugin_names[item.name],
                mig_config=layout_names[item.name],
            )
        )
    return NodeConfig(manifests, notes + pool_override_notes(nodes))


def _name_configs(
    nodes: list[NodeGpus],
    contents: dict[str, _Content],
    plain_name: str,
    plain: _Content,
    what: str,
) -> tuple[dict[str, str], dict[str, _Content]]:
    """Node -> config name, and name -> config. The plain config keeps its reserved name; another
    is named after the node's pool when all the pool's nodes need it, else after the node."""
    members: dict[str, list[str]] = {}
    for item in nodes:
        if item.node.pool is not None:
            members.setdefault(item.node.pool, []).append(item.name)
    names: dict[str, str] = {}
    named: dict[str, _Content] = {plain_name: plain}
    owners: dict[str, str] = {plain_name: "nodes that need nothing special"}
    for item in nodes:
        content = contents[item.name]
        pool = item.node.pool
        if content == plain:
            name, owner = plain_name, owners[plain_name]
        elif pool is not None and all(contents[m] == content for m in members[pool]):
            name, owner = pool, f"pool {pool}"
        else:
            name, owner = item.name, f"node {item.name}"
        if name in named and named[name] != content:
            raise KubeRenderError(
                f"the {what} of {owner} and that of {owners[name]} would both be named {name!r}: "
                "rename the pool or the node so that no pool has a node's name "
                f"and neither is called {DEFAULT_CONFIG!r} or {ALL_DISABLED!r}"
            )
        named[name] = content
        owners[name] = owner
        names[item.name] = name
    return names, named


def _config_map(name: str, namespace: str, data: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(name, namespace=namespace),
        "data": data,
    }


def _dump(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False)
