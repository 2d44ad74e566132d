"""How long one scheduler-extender call takes on a cluster of openb's size, per placement policy.

    .venv/bin/python bench/extender_calls.py [--data ../shared/data/openb] [--held 3000]
        [--calls 24] [--policies best-fit,fgd,fgd-balanced] [--scale 1] [--json]

kube-scheduler waits for each extender call up to the rendered `httpTimeout` (5 s); a call that
takes longer counts as failed and, the extender being `ignorable`, the pod is placed by the
default scoring instead: nothing says so but worse packing. So the extender's time per call at
the size of a real fleet is what an operator needs to know before choosing a policy.

The cluster: the 1,213 nodes of openb_node_list_gpu_node.csv as Node objects, and the first
`--held` pods of openb_pod_list_default.csv that kube-scheduler could count (whole-GPU and
CPU-only pods; openb's GPU-sharing pods ask no whole GPU) bound to the nodes best-fit gives them,
as Pod objects; `--scale K` makes K copies of both (nodes and their pods renamed), a fleet K
times openb's. Each call is the extender's whole `filter`: both LISTs (answered from memory, the
JSON bodies decoded on every call as the API's would be), reading every pod's request, and the
policy's choice among every node. The pods asked about are the next whole-GPU pods of the trace,
the same for every policy; each is asked once, pending, and is not bound. Best-fit, the
extender's default, is the baseline: every row shows its ratio to best-fit's median of the same
run. Results are recorded in docs/kubernetes.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpuplex.core.serve.latency_summary import nearest_rank
from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import parse_quantity
from gpuplex.kube.extender import EXTENDER_POLICIES, GPU_RESOURCE
from gpuplex.kube.extender_view import ClusterView
from gpuplex.kube.kueue_flavors import GPU_PRODUCT_LABEL
from gpuplex.replay.openb import load_nodes, load_pods

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "openb"
DEFAULT_POLICIES = ("best-fit", "fgd", "fgd-balanced")
#: the rendered extender's httpTimeout (gpuplex.kube.render): a call past it counts as failed
HTTP_TIMEOUT_S = 5.0

Manifest = dict[str, Any]


class MemoryApi:
    """Answers the extender's two LISTs from JSON bodies made once, decoded on every call."""

    address = "memory"
    source = "bench"

    def __init__(self, nodes: list[Manifest], pods: list[Manifest]) -> None:
        self._bodies = {
            "/api/v1/nodes": json.dumps({"kind": "NodeList", "items": nodes}),
            "/api/v1/pods": json.dumps({"kind": "PodList", "items": pods}),
        }

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: str | None = None,
        content_type: str | None = None,
    ) -> Reply:
        text = self._bodies[path]
        return Reply(200, json.loads(text), text)


def node_object(node: TraceNode) -> Manifest:
    allocatable = {"cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi"}
    if node.gpus:
        allocatable[GPU_RESOURCE] = str(node.gpus)
    return {
        "metadata": {"name": node.name, "labels": {GPU_PRODUCT_LABEL: node.model}},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


def pod_object(pod: TracePod, uid: str, node: str | None) -> Manifest:
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.num_gpu:
        requests[GPU_RESOURCE] = str(pod.num_gpu)
    spec: Manifest = {"containers": [{"name": "main", "resources": {"requests": requests}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {"name": pod.name, "namespace": "bench", "uid": uid},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def countable(pod: TracePod) -> bool:
    """A pod kube-scheduler counts as the extender does: whole GPUs, or none."""
    return pod.num_gpu == 0 or pod.gpu_milli == 1000


def bound_by_best_fit(
    nodes: list[TraceNode], pods: Sequence[TracePod]
) -> list[tuple[TracePod, str]]:
    """Each pod that fits, with the node best-fit gives it, in order; the others are left out."""
    state = ClusterState.empty(nodes)
    policy = policy_named("best-fit", pods)
    rng = np.random.default_rng(0)
    bound = []
    for pod in pods:
        choice = choose(state, pod, policy, rng)
        if choice is None:
            continue
        state.place(choice.node, pod, choice.gpus)
        bound.append((pod, nodes[choice.node].name))
    return bound


@dataclass(frozen=True, slots=True)
class PolicyRow:
    policy: str
    calls: int
    p50_ms: float
    p95_ms: float
    max_ms: float
    cpu_ms_per_call: float
    placed: int
    p50_vs_baseline: float
    max_share_of_timeout: float


def time_calls(
    api: MemoryApi, policy: str, asked: Sequence[Manifest], names: list[str]
) -> tuple[list[float], float, int]:
    """Each call's seconds, the CPU seconds of all of them, and how many found a node."""
    view = ClusterView(api, parse_quantity, policy)
    view.filter(asked[0], names)  # the first call pays for imports and caches, not counted
    seconds, placed = [], 0
    cpu = time.process_time()
    for pod in asked:
        start = time.perf_counter()
        chosen = view.filter(pod, names)
        seconds.append(time.perf_counter() - start)
        placed += chosen.node is not None
    return seconds, time.process_time() - cpu, placed


def scaled(
    nodes: list[TraceNode], bound: list[tuple[TracePod, str]], scale: int
) -> tuple[list[TraceNode], list[tuple[TracePod, str]]]:
    """`scale` copies of the nodes and of the pods bound to them, the copies renamed."""
    if scale == 1:
        return nodes, bound
    copies = range(scale)
    return (
        [replace(n, name=f"{n.name}-{k}") for k in copies for n in nodes],
        [(replace(p, name=f"{p.name}-{k}"), f"{node}-{k}") for k in copies for p, node in bound],
    )


def measure(
    data: Path, held: int, calls: int, policies: Sequence[str], scale: int = 1
) -> dict[str, Any]:
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    trace = [p for p in load_pods(data / "openb_pod_list_default.csv") if countable(p)]
    if len(trace) < held + calls:
        raise SystemExit(
            f"the trace has {len(trace)} countable pods: ask fewer than {held}+{calls}"
        )
    nodes, bound = scaled(nodes, bound_by_best_fit(nodes, trace[:held]), scale)
    pods = [pod_object(pod, f"held-{i}", node) for i, (pod, node) in enumerate(bound)]
    api = MemoryApi([node_object(n) for n in nodes], pods)
    later = [p for p in trace[held:] if p.num_gpu > 0][:calls]
    asked = [pod_object(pod, f"asked-{i}", None) for i, pod in enumerate(later)]
    names = [n.name for n in nodes]
    rows: list[PolicyRow] = []
    baseline = None
    for policy in policies:
        seconds, cpu_s, placed = time_calls(api, policy, asked, names)
        p50 = statistics.median(seconds)
        baseline = baseline if baseline is not None else p50
        rows.append(
            PolicyRow(
                policy=policy,
                calls=len(seconds),
                p50_ms=round(p50 * 1000, 1),
                p95_ms=round(nearest_rank(sorted(seconds), 0.95) * 1000, 1),
                max_ms=round(max(seconds) * 1000, 1),
                cpu_ms_per_call=round(cpu_s / len(seconds) * 1000, 1),
                placed=placed,
                p50_vs_baseline=round(p50 / baseline, 2),
                max_share_of_timeout=round(max(seconds) / HTTP_TIMEOUT_S, 3),
            )
        )
    gpu_pods = sum(1 for pod, _ in bound if pod.num_gpu)
    return {
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load_average_at_start": round(os.getloadavg()[0], 2),
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "held_pods": len(bound),
        "held_gpu_pods": gpu_pods,
        "held_gpus": sum(pod.num_gpu for pod, _ in bound),
        "asked_gpus": [pod.num_gpu for pod in later],
        "baseline": policies[0],
        "rows": [asdict(r) for r in rows],
    }


def show(result: dict[str, Any], console: Console) -> None:
    console.print(
        f"{result['nodes']:,} nodes, {result['gpus']:,} GPUs; {result['held_pods']:,} pods bound "
        f"({result['held_gpu_pods']:,} GPU pods holding {result['held_gpus']:,} GPUs); "
        f"{len(result['asked_gpus'])} pending GPU pods asked about, once each; "
        f"{result['machine']}, load {result['load_average_at_start']} at start"
    )
    table = Table(title=f"one extender filter call, against {result['baseline']} in the same run")
    for column in ("policy", "calls", "p50 ms", "p95 ms", "max ms", "CPU ms / call", "placed"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    table.add_column(f"p50 / {result['baseline']}", justify="right")
    table.add_column(f"max / {HTTP_TIMEOUT_S:g} s timeout", justify="right")
    for row in result["rows"]:
        table.add_row(
            row["policy"],
            str(row["calls"]),
            f"{row['p50_ms']:,.1f}",
            f"{row['p95_ms']:,.1f}",
            f"{row['max_ms']:,.1f}",
            f"{row['cpu_ms_per_call']:,.1f}",
            str(row["placed"]),
            f"{row['p50_vs_baseline']:.2f}",
            f"{row['max_share_of_timeout']:.1%}",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--held", type=int, default=3000, help="pods bound before the calls")
    parser.add_argument("--calls", type=int, default=24, help="pending GPU pods asked about")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--scale", type=int, default=1, help="copies of the nodes and pods")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in EXTENDER_POLICIES]
    if unknown or not policies:
        parser.error(
            f"--policies: {unknown or 'none'}; choose among {', '.join(EXTENDER_POLICIES)}"
        )
    if args.held < 0 or args.calls < 1 or args.scale < 1:
        parser.error("--held must be 0 or more, --calls and --scale at least 1")
    if not (args.data / "openb_node_list_gpu_node.csv").is_file():
        parser.error(f"--data {args.data}: no openb_node_list_gpu_node.csv there")
    result = measure(args.data, args.held, args.calls, policies, args.scale)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result, Console(width=140))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
