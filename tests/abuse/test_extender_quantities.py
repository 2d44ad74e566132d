"""A tenant who reads gpuplex/kube/extender_view.py (each distinct quantity string is read once
and kept) and creates pods whose requests spell their quantities all differently ("1001m",
"1002m", ...), to grow the extender's memory without bound or to get a wrong answer from a
string kept too long. Through the extender's own `ClusterView` over an API double answering
as the API server does. docs/security.md lists it with what holds."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuplex.kube.api import Reply
from gpuplex.kube.apply import parse_quantity
from gpuplex.kube.extender_view import LIVE_PODS, QUANTITIES_KEPT, ClusterView
from tests.clocks import ManualClock

#: more spellings than the extender keeps
SPELLINGS = QUANTITIES_KEPT + 1000


def _node(name: str) -> dict[str, Any]:
    allocatable = {"cpu": "96", "memory": "384Gi", "nvidia.com/gpu": "8"}
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def _pod(uid: str, cpu: str, gpus: int, node: str | None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    resources = {"requests": {"cpu": cpu, "memory": "1Mi"}, "limits": limits}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": uid, "uid": uid}, "spec": spec, "status": {"phase": "Running"}}


class Api:
    """The two LISTs the extender sends, as the API server answers them."""

    address = "https://api.test"
    source = "test"

    def __init__(self, nodes: list[Any], pods: list[Any]) -> None:
        self.nodes, self.pods = nodes, pods

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: str | None = None,
        content_type: str | None = None,
    ) -> Reply:
        if path == "/api/v1/nodes":
            return Reply(200, {"kind": "NodeList", "items": self.nodes})
        assert dict(query or []).get("fieldSelector") == LIVE_PODS
        return Reply(200, {"kind": "PodList", "items": self.pods})


def test_pods_spelling_every_quantity_differently_keep_memory_bounded_and_answers_right() -> None:
    # the tenant's CPU-only pods on `a`, each 1 to 5,096 millicores, all spelled apart, and
    # 6 GPUs taken on `a`: a 2-GPU pod fits `a` best by GPUs left (2), if `a`'s CPU still has room
    flood = [_pod(f"t{i}", f"{1000 + i}u", 0, "a") for i in range(SPELLINGS)]
    held = [_pod("six", "4", 6, "a")]
    api = Api([_node("a"), _node("b")], flood + held)
    read: list[str] = []

    def counting(text: str) -> Decimal:
        read.append(text)
        return parse_quantity(text)

    view = ClusterView(api, counting, "best-fit", ManualClock())
    uncached = ClusterView(api, parse_quantity, "best-fit", ManualClock())
    asked = _pod("asked", "8", 2, None)
    for _ in range(2):
        assert view.filter(asked, ["a", "b"]).node == "a"
        assert uncached.filter(asked, ["a", "b"]).node == "a"
    # the spellings beyond what is kept are read again on the second call: what the extender
    # keeps is bounded (at most QUANTITIES_KEPT strings), the flood costs time, not memory
    assert len(set(read)) > QUANTITIES_KEPT
    assert len(read) > len(set(read)) + QUANTITIES_KEPT // 2
    # and once the tenant's flood is gone, the same pod gets the same answer
    api.pods = held
    assert view.filter(asked, ["a", "b"]).node == "a"
