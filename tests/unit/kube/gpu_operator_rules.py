"""The GPU operator's own rules for the configs gpuplex renders, written from
shared/reference/gpu-sharing-facts.md (§2 mig-parted, §3.1 device plugin), independently of the
renderer: which keys each level allows, replicas >= 2, MPS never with MIG, profile names and counts
valid for each GPU model. Each function returns the problems found, [] when there are none."""

from __future__ import annotations

import re
from typing import Any

import yaml

from gpuplex.core.catalog import gpu_model
from gpuplex.core.spec import GpuplexSpec

# §3.1: the keys the device plugin's config file knows (api/config/v1).
PLUGIN_TOP_KEYS = {"version", "flags", "sharing", "resources"}
PLUGIN_FLAG_KEYS = {"migStrategy", "failOnInitError", "nvidiaDriverRoot", "mpsRoot", "plugin"}
SHARING_KEYS = {"timeSlicing", "mps"}
SHARED_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
SHARED_RESOURCE_KEYS = {"name", "replicas", "rename", "devices"}
MIG_STRATEGIES = {"none", "single", "mixed"}

# §2: mig-parted's spec (api/spec/v1).
MIG_TOP_KEYS = {"version", "mig-configs"}
MIG_ENTRY_KEYS = {"device-filter", "devices", "mig-enabled", "mig-devices"}
#: go-nvlib profile grammar (§1.1): `<G>g.<GB>gb` or `<C>c.<G>g.<GB>gb`, optional +attr / -attr.
PROFILE_NAME = re.compile(
    r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb([+-][a-z][a-z0-9.]*(,[a-z][a-z0-9.]*)*)?$"
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def device_plugin_problems(config: Any) -> list[str]:
    """One device-plugin config file (the parsed YAML of one ConfigMap key)."""
    if not isinstance(config, dict):
        return [f"not a map: {config!r}"]
    problems = [f"unknown top-level key {k!r}" for k in config if k not in PLUGIN_TOP_KEYS]
    if config.get("version") != "v1":
        problems.append(f"version is {config.get('version')!r}, not 'v1'")
    flags = config.get("flags", {})
    problems += [f"unknown flag {k!r}" for k in flags if k not in PLUGIN_FLAG_KEYS]
    strategy = flags.get("migStrategy", "none")
    if strategy not in MIG_STRATEGIES:
        problems.append(f"migStrategy {strategy!r}")
    sharing = config.get("sharing")
    if sharing is None:
        return problems
    problems += [f"unknown sharing key {k!r}" for k in sharing if k not in SHARING_KEYS]
    if len(sharing) != 1:
        problems.append(f"time-slicing and MPS are mutually exclusive: {sorted(sharing)}")
    for method, shared in sharing.items():
        problems += [f"{method}: unknown key {k!r}" for k in shared if k not in SHARED_KEYS]
        if shared.get("renameByDefault") is not True:
            problems.append(f"{method}: shares must be renamed to nvidia.com/gpu.shared")
        resources = shared.get("resources")
        if not resources:
            problems.append(f"{method}: no resources specified")
        for resource in resources or []:
            problems += [
                f"{method}: unknown resource key {k!r}"
                for k in resource
                if k not in SHARED_RESOURCE_KEYS
            ]
            replicas = resource.get("replicas")
            if not _is_int(replicas) or replicas < 2:
                problems.append(f"{method}: number of replicas must be >= 2, got {replicas!r}")
            if method == "mps" and resource.get("name") != "nvidia.com/gpu":
                problems.append("mps: only full GPUs (nvidia.com/gpu) can be shared by MPS")
        if method == "mps":
            if strategy == "mixed":
                problems.append("mps with migStrategy mixed is refused by the plugin")
            if not flags.get("mpsRoot"):
                problems.append("mps without flags.mpsRoot")
    return problems


def mig_parted_problems(document: Any) -> list[str]:
    """A whole mig-parted config, without knowing which GPUs it lands on."""
    if not isinstance(document, dict):
        return [f"not a map: {document!r}"]
    problems = [f"unexpected field {k!r}" for k in document if k not in MIG_TOP_KEYS]
    if document.get("version") != "v1":
        problems.append(f"unknown version {document.get('version')!r}")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        return [*problems, "mig-configs must hold at least one config"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"{name}: empty config")
            continue
        for entry in entries:
            problems += [f"{name}: {p}" for p in _entry_problems(entry)]
    return problems


def _entry_problems(entry: dict[str, Any]) -> list[str]:
    problems = [f"unknown key {k!r}" for k in entry if k not in MIG_ENTRY_KEYS]
    devices = entry.get("devices")
    if devices != "all" and not (
        isinstance(devices, list)
        and devices
        and all(_is_int(d) and d >= 0 for d in devices)
        and len(set(devices)) == len(devices)
    ):
        problems.append(f"devices must be 'all' or a list of GPU indices, got {devices!r}")
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        problems.append(f"mig-enabled must be true or false, got {enabled!r}")
    mig_devices = entry.get("mig-devices")
    if enabled is True and not isinstance(mig_devices, dict):
        problems.append("mig-enabled without mig-devices")
    if enabled is False and mig_devices:
        problems.append("mig-devices on a GPU with MIG disabled")
    counts = mig_devices or {}
    for profile, count in counts.items():
        if not PROFILE_NAME.match(str(profile)):
            problems.append(f"profile {profile!r} breaks the profile grammar")
        if not _is_int(count) or count < 0:
            problems.append(f"count of {profile} is {count!r}")
    if counts and not any(counts.values()):
        problems.append("all counts are 0")
    return problems


def layout_counts(entries: list[dict[str, Any]], gpu_count: int) -> dict[int, dict[str, int]]:
    """GPU index -> profile -> count that a layout gives a node of `gpu_count` GPUs; GPUs the
    layout leaves without MIG are absent."""
    out: dict[int, dict[str, int]] = {}
    seen: set[int] = set()
    for entry in entries:
        indices = range(gpu_count) if entry["devices"] == "all" else entry["devices"]
        for index in indices:
            assert index not in seen, f"GPU {index} is in two entries of one layout"
            seen.add(index)
            if entry["mig-enabled"]:
                out[index] = dict(entry.get("mig-devices") or {})
    return out


def layout_fit_problems(
    entries: list[dict[str, Any]], gpu_models: list[str], node: str
) -> list[str]:
    """A layout on one node whose GPU i is of model `gpu_models[i]`: every profile is one of the
    model's, within its maximum count, and the slices fit the GPU (§1.2)."""
    problems = []
    for entry in entries:
        if entry["devices"] != "all":
            problems += [
                f"{node}: GPU {i} does not exist" for i in entry["devices"] if i >= len(gpu_models)
            ]
    for index, counts in layout_counts(entries, len(gpu_models)).items():
        if index >= len(gpu_models):
            continue
        model = gpu_model(gpu_models[index])
        if model is None or model.mig is None:
            problems.append(f"{node}: GPU {index} ({gpu_models[index]}) has no MIG")
            continue
        compute = memory = 0
        for name, count in counts.items():
            profile = model.mig.profile(name)
            if profile is None:
                problems.append(f"{node}: GPU {index}: {name} is not a {model.name} profile")
                continue
            if count > profile.max_count:
                problems.append(f"{node}: GPU {index}: {count} x {name} > {profile.max_count}")
            compute += count * profile.compute_slices
            memory += count * profile.memory_slices
        if compute > model.mig.compute_slices or memory > model.mig.memory_slices:
            problems.append(f"{node}: GPU {index}: {compute} compute / {memory} memory slices")
    return problems


def parse_node_config(
    manifests: list[dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """(device-plugin configs by name, the mig-parted document, Node objects by name), parsed from
    the rendered ConfigMaps' YAML text."""
    by_name = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ConfigMap"}
    plugin_data = by_name["gpuplex-device-plugin-config"]["data"]
    mig_data = by_name["gpuplex-mig-parted-config"]["data"]
    assert set(mig_data) == {"config.yaml"}
    assert all(isinstance(v, str) for v in [*plugin_data.values(), *mig_data.values()])
    plugin = {name: yaml.safe_load(text) for name, text in plugin_data.items()}
    nodes = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Node"}
    return plugin, yaml.safe_load(mig_data["config.yaml"]), nodes


def node_config_problems(spec: GpuplexSpec, manifests: list[dict[str, Any]]) -> list[str]:
    """Every rule above over a whole rendered node configuration, plus what ties them together:
    each Node's labels name configs that exist, and a node sharing by MPS has no GPU in MIG mode
    and is not told the mixed strategy."""
    plugin, mig_doc, nodes = parse_node_config(manifests)
    problems = [
        f"device plugin {name}: {p}"
        for name, c in plugin.items()
        for p in device_plugin_problems(c)
    ]
    problems += [f"mig-parted: {p}" for p in mig_parted_problems(mig_doc)]
    layouts = mig_doc["mig-configs"]
    if "default" not in plugin:
        problems.append("no `default` device-plugin config for the operator's default")
    if layouts.get("all-disabled") != [{"devices": "all", "mig-enabled": False}]:
        problems.append("no plain all-disabled layout")
    for node in spec.fleet.nodes:
        labels = nodes[node.name]["metadata"]["labels"]
        config_name = labels["nvidia.com/device-plugin.config"]
        layout_name = labels["nvidia.com/mig.config"]
        if config_name not in plugin or layout_name not in layouts:
            problems.append(
                f"{node.name}: labels name missing configs {config_name}, {layout_name}"
            )
            continue
        models = [g.model for g in node.gpus for _ in range(g.count)]
        problems += layout_fit_problems(layouts[layout_name], models, node.name)
        mig_on = layout_counts(layouts[layout_name], len(models))
        config = plugin[config_name]
        if "mps" in config.get("sharing", {}) and mig_on:
            problems.append(f"{node.name}: MPS beside MIG GPUs {sorted(mig_on)}")
        strategy = config["flags"]["migStrategy"]
        if mig_on and strategy != "mixed":
            problems.append(f"{node.name}: MIG GPUs but migStrategy {strategy}")
    return problems
