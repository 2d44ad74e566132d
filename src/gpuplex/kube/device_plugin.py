"""Per node, the NVIDIA device plugin's config (gpu-sharing-facts.md §3.1), from the plan's modes.

The device plugin shares all full GPUs of a node one way: not at all, by MPS, or by time-slicing (the
two are mutually exclusive), and it refuses MPS on a node with MIG (mixed strategy). So a node may
hold MIG slices beside whole GPUs, or beside time-sliced GPUs, but each node's full GPUs need one
method, and MPS needs a node without MIG. A plan that breaks this cannot run on Kubernetes as
planned; rendering it anyway would hand tenants other isolation than they were planned, so it is
refused with what to change.

Shared replicas are renamed `nvidia.com/gpu.shared` (`renameByDefault`), so quotas and the admission
policy tell a share from a whole GPU, and a pod may ask for one share only
(`failRequestsGreaterThanOne`): two shares would not give it twice the GPU.
"""

from __future__ import annotations

from typing import Any

from gpuplex.core.plan import GpuView, Mode
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import GPU_RESOURCE
from gpuplex.kube.nodes import NodeGpus, gpu_list

#: Where the MPS control daemon keeps its pipes on the host (the plugin's and the operator's default).
MPS_ROOT = "/run/nvidia/mps"
#: The plugin refuses fewer ("number of replicas must be >= 2").
MIN_REPLICAS = 2

#: The config of a node gpuplex shares nothing on and slices nothing on: also what a node outside
#: the fleet gets as the operator's default.
PLAIN_CONFIG: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": "none"}}

_METHOD = {
    Mode.DEDICATED: "whole GPUs",
    Mode.MPS: "MPS",
    Mode.TIMESLICE: "time-slicing",
}


def check_sharing(nodes: list[NodeGpus]) -> None:
    """Refuse a plan some node of which the device plugin cannot run, naming every such node."""
    clashes = [clash for item in nodes if (clash := _clash(item)) is not None]
    if clashes:
        raise KubeRenderError(
            "the plan cannot run on Kubernetes as planned:\n" + "\n".join(f"- {c}" for c in clashes)
        )


def device_plugin_config(item: NodeGpus) -> tuple[dict[str, Any], list[str]]:
    """The node's device-plugin config, and notes where its equal MPS shares give a replica less
    than the plan did. Call after `check_sharing`: this assumes the node needs one method."""
    flags: dict[str, Any] = {"migStrategy": "mixed" if item.mig_gpus() else "none"}
    config: dict[str, Any] = {"version": "v1", "flags": flags}
    modes = {g.mode for g in item.full_gpus() if g.mode is not None}
    shared = [g for g in item.full_gpus() if g.mode in (Mode.MPS, Mode.TIMESLICE)]
    if not shared:
        return config, []
    replicas = max(MIN_REPLICAS, *(len(g.occupants) for g in shared))
    sharing = {
        "renameByDefault": True,
        "failRequestsGreaterThanOne": True,
        "resources": [{"name": GPU_RESOURCE, "replicas": replicas}],
    }
    if Mode.MPS in modes:
        flags["mpsRoot"] = MPS_ROOT
        config["sharing"] = {"mps": sharing}
        return config, _mps_notes(item.name, shared, replicas)
    config["sharing"] = {"timeSlicing": sharing}
    return config, []


def _mps_notes(node: str, gpus: list[GpuView], replicas: int) -> list[str]:
    """The plugin gives every MPS replica of a GPU the same limits: memory / replicas and
    100 / replicas percent of the SMs (integer division, as the plugin does)."""
    notes = []
    for gpu in gpus:
        share_mib = gpu.memory_mib // replicas
        share_percent = 100 // replicas
        for occupant in gpu.occupants:
            short = []
            if occupant.memory_mib > share_mib:
                short.append(f"{occupant.memory_mib} MiB of memory")
            if occupant.thread_percent is not None and occupant.thread_percent > share_percent:
                short.append(f"{occupant.thread_percent}% of the SMs")
            if short:
                notes.append(
                    f"node {node} GPU {gpu.index}: {occupant.label()} was planned "
                    f"{' and '.join(short)}, but the device plugin gives each of its {replicas} MPS "
                    f"replicas per GPU {share_mib} MiB and {share_percent}% of the SMs, so it gets "
                    "less than planned"
                )
    return notes


def _clash(item: NodeGpus) -> str | None:
    by_mode: dict[Mode, list[GpuView]] = {}
    for gpu in item.full_gpus():
        if gpu.mode is not None:
            by_mode.setdefault(gpu.mode, []).append(gpu)
    mig = item.mig_gpus()
    mixed_full = len(by_mode) > 1
    mps_beside_mig = Mode.MPS in by_mode and bool(mig)
    if not (mixed_full or mps_beside_mig):
        return None
    # What each group of GPUs runs, in GPU order.
    parts = [(gpus[0].index, _describe(_METHOD[mode], gpus)) for mode, gpus in by_mode.items()]
    if mps_beside_mig:
        parts.append((mig[0].index, _describe_mig(mig)))
    why = []
    if mixed_full:
        why.append(
            "shares all full GPUs of a node one way (not at all, by MPS or by time-slicing)"
            + (
                "; time-slicing and MPS are mutually exclusive"
                if {Mode.MPS, Mode.TIMESLICE} <= by_mode.keys()
                else ""
            )
        )
    if mps_beside_mig:
        why.append(
            "does not run MPS on a node with MIG enabled (it refuses MPS with the mixed MIG "
            "strategy that MIG slices need)"
        )
    return (
        f"node {item.name}: {', '.join(text for _, text in sorted(parts))}. The NVIDIA device plugin {', and '.join(why)}. "
        f"Fix: {_fix(item, by_mode)}."
    )


def _describe(method: str, gpus: list[GpuView]) -> str:
    workloads = sorted({f"{o.tenant}/{o.workload}" for g in gpus for o in g.occupants})
    verb = "runs" if len(gpus) == 1 else "run"
    return f"{gpu_list([g.index for g in gpus])} {verb} {method} ({', '.join(workloads)})"


def _describe_mig(mig: list[GpuView]) -> str:
    sliced = [g for g in mig if g.occupants]
    held = [g for g in mig if not g.occupants]
    parts = []
    if sliced:
        parts.append(_describe("MIG slices", sliced))
    if held:
        verb = "is" if len(held) == 1 else "are"
        parts.append(f'{gpu_list([g.index for g in held])} {verb} held in MIG mode (mig: "on")')
    return ", ".join(parts)


def _fix(item: NodeGpus, by_mode: dict[Mode, list[GpuView]]) -> str:
    if Mode.MPS in by_mode:
        fix = (
            "put the MPS workloads in their own pool (`pool:` on those workloads and on nodes that "
            "run only MPS" + (" and no MIG)" if item.mig_gpus() else ")")
        )
        if not [g for g in item.mig_gpus() if g.occupants] and item.mig_gpus():
            fix += ', or set `mig: "auto"` or `"off"` on the GPUs held in MIG mode'
        return fix
    shared = "time-slicing"
    return (
        f"put the {shared} workloads in their own pool (`pool:` on those workloads and on nodes "
        f"that run only {shared}), away from the dedicated GPUs"
    )
