"""What the scheduler extender reads of the cluster, and the choices it has made that the API does
not show yet.

Each call lists the nodes and the non-terminal pods from the API server (two LIST requests), so
every decision starts from what is bound now. A call's time grows with the pods listed: measured
by `bench/extender_calls.py`, tens of milliseconds at 3,000 pods on openb's 1,213 nodes, about a
second at ten times both (docs/kubernetes.md); an informer cache would replace the lists at fleet
scale. Quantities repeat across pods ("4", "16Gi"), so each distinct one is read once
(`QUANTITIES_KEPT`) instead of once per pod and call.

kube-scheduler binds a pod after the extender chose its node, in the background: the next pod's
call can come before the binding reaches the API. So the extender remembers each choice (the
pod's uid, its node and its ask) and counts it as held while the API still lists that pod unbound,
for at most `ASSUMED_FOR_S`. A choice for a pod the API does not list (deleted, or never created:
a forged call) counts for nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.errors import KubeApiError
from gpuplex.kube.api import Transport
from gpuplex.kube.extender import (
    Held,
    Manifest,
    NodeChoice,
    PodAsk,
    Quantity,
    UnreadableRequest,
    place,
    pod_ask,
    priorities,
)

#: how many distinct quantity strings the extender keeps read (a quantity reads the same forever)
QUANTITIES_KEPT = 4096
#: how long a choice counts while its pod is still listed unbound: kube-scheduler binds within
#: seconds, or gives up and asks again (which replaces the choice)
ASSUMED_FOR_S = 60.0
#: the pods kube-scheduler counts: every one not finished
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class _Assumed:
    node: str
    ask: PodAsk
    at_s: float


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """The listed nodes by name, what holds part of each, and the GPU work the cluster holds."""

    nodes: dict[str, Manifest]
    held: list[Held]
    workload: list[PodAsk]


class ClusterView:
    """The extender's view: the API's lists plus its own recent choices. Thread-safe."""

    def __init__(
        self, transport: Transport, quantity: Quantity, policy: str, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._transport, self.policy, self._clock = transport, policy, clock
        self._quantity: Quantity = functools.lru_cache(maxsize=QUANTITIES_KEPT)(quantity)
        self._assumed: dict[str, _Assumed] = {}
        self._lock = threading.Lock()

    def filter(self, pod: Manifest, names: Sequence[str]) -> NodeChoice:
        """The node `pod` goes to among the candidates `names`, remembered until it is bound."""
        ask = self._ask(pod)
        if ask is None:
            return NodeChoice(None, "the pod's request cannot be read")
        snapshot = self._snapshot(_uid(pod))
        candidates = [snapshot.nodes[n] for n in names if n in snapshot.nodes]
        chosen = place(
            ask, candidates, snapshot.held, self.policy, snapshot.workload, self._quantity
        )
        if chosen.node is not None and _uid(pod):
            with self._lock:
                self._assumed[_uid(pod)] = _Assumed(chosen.node, ask, self._clock.monotonic_s())
        return chosen

    def prioritize(self, pod: Manifest, names: Sequence[str]) -> dict[str, int]:
        """Each candidate's priority (0..10) for `pod`; nothing is remembered."""
        ask = self._ask(pod)
        if ask is None:
            return dict.fromkeys(names, 0)
        snapshot = self._snapshot(_uid(pod))
        candidates = [snapshot.nodes[n] for n in names if n in snapshot.nodes]
        scores = priorities(
            ask, candidates, snapshot.held, self.policy, snapshot.workload, self._quantity
        )
        return {name: scores.get(name, 0) for name in names}

    def _ask(self, pod: Manifest) -> PodAsk | None:
        try:
            return pod_ask(pod, self._quantity)
        except UnreadableRequest:
            return None

    def _snapshot(self, scheduling: str) -> ClusterSnapshot:
        nodes = {
            str(n["metadata"]["name"]): n
            for n in self._list("/api/v1/nodes", [])
            if (n.get("metadata") or {}).get("name")
        }
        pods = self._list("/api/v1/pods", [("fieldSelector", LIVE_PODS)])
        held: list[Held] = []
        workload: list[PodAsk] = []
        unbound: set[str] = set()
        for pod in pods:
            ask = self._ask(pod)
            if ask is None:
                continue
            if ask.gpus > 0:
                workload.append(ask)
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                held.append(Held(str(node), ask))
            elif _uid(pod) != scheduling:
                unbound.add(_uid(pod))
        held += self._still_assumed(unbound)
        return ClusterSnapshot(nodes, held, workload)

    def _still_assumed(self, unbound: set[str]) -> list[Held]:
        """The remembered choices whose pods the API lists and has not bound yet; the others are
        forgotten."""
        now = self._clock.monotonic_s()
        with self._lock:
            self._assumed = {
                uid: choice
                for uid, choice in self._assumed.items()
                if uid in unbound and now - choice.at_s < ASSUMED_FOR_S
            }
            return [Held(choice.node, choice.ask) for choice in self._assumed.values()]

    def _list(self, path: str, query: list[tuple[str, str]]) -> list[Manifest]:
        reply = self._transport.send("GET", path, query=query)
        if reply.status != 200:
            reason = reply.body.get("message") or reply.text[:200]
            raise KubeApiError(f"list {path}: the API answered {reply.status}: {reason}")
        items = reply.body.get("items") or []
        return [item for item in items if isinstance(item, dict)]


def _uid(pod: Manifest) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")
