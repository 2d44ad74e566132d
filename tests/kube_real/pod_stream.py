"""A stream of pods run through a real kube-scheduler on fake nodes, as a kubelet-less cluster
would see it: each arriving pod is created and waited for until the scheduler binds it or calls
it Unschedulable (then it is deleted: it failed, and is not retried, as in the simulator); each
departing pod is deleted at once (grace period 0, as a kubelet ends a pod that finished).

The test keeps its own books of what each node holds (from the bindings it read back), written
here and sharing nothing with the extender: where the scheduler says Unschedulable while the books
still show a node with room, the scheduler has not yet seen a departure (its informer lags the
API by milliseconds), so the pod is waited for a little longer (kube-scheduler retries such a pod
when the departure reaches it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpuplex.kube.apply import ClientTransport
from gpuplex.replay.stream import StreamEvent
from tests.kube_real.cluster import send_json

#: how long one pod may wait for the scheduler's verdict
VERDICT_TIMEOUT_S = 30.0
#: how long an Unschedulable verdict the books disagree with is given to change
RETRY_GRACE_S = 5.0
POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class StreamNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int


@dataclass
class StreamRun:
    """One stream through one scheduler: where each pod went, the GPUs allocated after every
    event, and the pods that failed."""

    label: str
    placed: dict[int, str] = field(default_factory=dict)
    failed: int = 0
    allocated_gpus: list[int] = field(default_factory=list)
    #: Unschedulable verdicts that changed once the scheduler caught up with a departure
    late_retries: int = 0

    def allocation_percent(self, capacity_gpus: int) -> float:
        return 100.0 * sum(self.allocated_gpus) / len(self.allocated_gpus) / capacity_gpus


def pod_manifest(
    event: StreamEvent, name: str, scheduler: str, selector: dict[str, str], taint: str
) -> dict[str, Any]:
    pod = event.pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "nodeSelector": selector,
            "tolerations": [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "work",
                    "image": "registry.local/none:1",
                    "resources": {
                        "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"},
                        "limits": {"nvidia.com/gpu": str(pod.num_gpu)},
                    },
                }
            ],
        },
    }


def run_stream(
    admin: ClientTransport,
    namespace: str,
    events: list[StreamEvent],
    nodes: list[StreamNode],
    *,
    scheduler: str,
    label: str,
    selector: dict[str, str],
    taint: str,
) -> StreamRun:
    run = StreamRun(label)
    free = {n.name: [n.cpu_milli, n.memory_mib, n.gpus] for n in nodes}
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for event in events:
        name = f"{label}-{event.index:04d}"
        ask = [event.pod.cpu_milli, event.pod.memory_mib, event.pod.num_gpu]
        if event.arrives:
            manifest = pod_manifest(event, name, scheduler, selector, taint)
            created = send_json(admin, "POST", pods, manifest)
            assert created.status == 201, created.text
            node = _verdict(admin, f"{pods}/{name}", free, ask, run)
            if node is None:
                run.failed += 1
                _delete(admin, f"{pods}/{name}")
            else:
                run.placed[event.index] = node
                free[node] = [have - want for have, want in zip(free[node], ask, strict=True)]
        elif event.index in run.placed:
            _delete(admin, f"{pods}/{name}")
            node = run.placed[event.index]
            free[node] = [have + want for have, want in zip(free[node], ask, strict=True)]
        held = {n.name: n.gpus - free[n.name][2] for n in nodes}
        run.allocated_gpus.append(sum(held.values()))
    return run


def _verdict(
    admin: ClientTransport, path: str, free: dict[str, list[int]], ask: list[int], run: StreamRun
) -> str | None:
    """The node the pod was bound to, or None once the scheduler calls it Unschedulable and the
    books agree that no node has room."""
    deadline = time.monotonic() + VERDICT_TIMEOUT_S
    unschedulable_since: float | None = None
    while time.monotonic() < deadline:
        reply = admin.send("GET", path)
        assert reply.status == 200, reply.text
        node = reply.body["spec"].get("nodeName")
        if node:
            if unschedulable_since is not None:
                run.late_retries += 1
            return str(node)
        if _unschedulable(reply.body):
            room = any(
                all(h >= w for h, w in zip(have, ask, strict=True)) for have in free.values()
            )
            if not room:
                return None
            unschedulable_since = unschedulable_since or time.monotonic()
            if time.monotonic() - unschedulable_since > RETRY_GRACE_S:
                return None
        time.sleep(POLL_S)
    raise AssertionError(f"{path}: no verdict from the scheduler in {VERDICT_TIMEOUT_S:.0f} s")


def _unschedulable(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
        for c in pod.get("status", {}).get("conditions", [])
    )


def _delete(admin: ClientTransport, path: str) -> None:
    gone = send_json(admin, "DELETE", path, {"gracePeriodSeconds": 0})
    assert gone.status in (200, 202), gone.text
