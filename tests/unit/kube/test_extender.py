"""The scheduler extender's decisions (`gpuplex.kube.extender`), its view of the cluster
(`extender_view`) and its HTTP face (`server.scheduler_extender`), on objects shaped as the API
server serves them. Against a real kube-scheduler: tests/kube_real/test_scheduler_extender.py."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuplex.errors import KubeApiError
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import parse_quantity
from gpuplex.kube.extender import (
    MAX_EXTENDER_PRIORITY,
    Held,
    PodAsk,
    UnreadableRequest,
    node_capacity,
    place,
    pod_ask,
    priorities,
)
from gpuplex.kube.extender_view import ASSUMED_FOR_S, LIVE_PODS, ClusterView
from gpuplex.server.scheduler_extender import create_extender_app
from tests.clocks import ManualClock


def node(name: str, gpus: int = 8, cpu: str = "96", memory: str = "384Gi", **more: str) -> Any:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110", **more}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def pod(
    uid: str,
    gpus: int = 1,
    cpu: str = "4",
    memory: str = "16Gi",
    node_name: str | None = None,
    phase: str = "Pending",
    **limits: str,
) -> Any:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}, "limits": {}}
    if gpus:
        resources["limits"]["nvidia.com/gpu"] = str(gpus)
    for key, value in limits.items():  # mig_3g.40gb="1": nvidia.com/mig-3g.40gb
        resources["limits"]["nvidia.com/" + key.replace("_", "-")] = value
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": uid, "uid": uid}, "spec": spec, "status": {"phase": phase}}


# -- what a pod asks -----------------------------------------------------------------------------


def test_a_pods_ask_is_the_larger_of_its_containers_and_its_largest_init_container() -> None:
    manifest = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
            ],
            "initContainers": [
                {"resources": {"requests": {"cpu": "3", "memory": "512Mi"}}},
                {"restartPolicy": "Always", "resources": {"requests": {"memory": "256Mi"}}},
            ],
            "overhead": {"cpu": "100m"},
        }
    }
    ask = pod_ask(manifest, parse_quantity)
    # CPU: max(0.5 + 1, 3) + 0.1; memory: the sidecar runs beside the containers: 1Gi + 256Mi
    assert ask == PodAsk(cpu_milli=3100, memory_mib=1280, gpus=2)


def test_a_mig_slice_is_asked_by_its_profile() -> None:
    ask = pod_ask(pod("a", gpus=0, **{"mig_3g.40gb": "1"}), parse_quantity)
    assert ask.gpus == 0
    assert dict(ask.mig) == {"3g.40gb": 1}
    assert ask.wants_gpu


def test_a_quantity_the_api_would_refuse_is_unreadable_not_a_crash() -> None:
    with pytest.raises(UnreadableRequest, match="cpu: 'lots'"):
        pod_ask(pod("a", cpu="lots"), parse_quantity)


def test_a_node_is_read_from_its_allocatable_resources() -> None:
    trace, mig = node_capacity(
        node("n", gpus=4, cpu="95500m", memory="1Gi", **{"nvidia.com/mig-1g.10gb": "7"}),
        parse_quantity,
    )
    assert (trace.cpu_milli, trace.memory_mib, trace.gpus) == (95_500, 1024, 4)
    assert mig == {"1g.10gb": 7}


# -- where a pod goes ----------------------------------------------------------------------------


def _ask(gpus: int, cpu_cores: int = 4) -> PodAsk:
    return PodAsk(cpu_milli=cpu_cores * 1000, memory_mib=16_384, gpus=gpus)


def test_best_fit_fills_the_node_with_the_least_left_and_ties_go_to_the_first_name() -> None:
    candidates = [node("c"), node("b"), node("a")]
    assert place(_ask(1), candidates, [], "best-fit", [], parse_quantity).node == "a"
    held = [Held("c", _ask(6))]
    assert place(_ask(1), candidates, held, "best-fit", [], parse_quantity).node == "c"


def test_an_eight_gpu_pod_gets_the_empty_node_that_best_fit_kept_whole() -> None:
    candidates = [node("a"), node("b")]
    held: list[Held] = []
    for _ in range(4):  # four 1-GPU pods, one after the other, as the extender sees them
        chosen = place(_ask(1), candidates, held, "best-fit", [], parse_quantity).node
        assert chosen is not None
        held.append(Held(chosen, _ask(1)))
    assert {h.node for h in held} == {"a"}
    assert place(_ask(8), candidates, held, "best-fit", [], parse_quantity).node == "b"


@pytest.mark.parametrize("policy", ["fgd", "fgd-balanced", "gpu-packing", "dot-product"])
def test_every_policy_places_a_whole_gpu_pod_where_it_fits(policy: str) -> None:
    candidates = [node("a"), node("b", gpus=2)]
    held = [Held("a", _ask(7))]
    workload = [_ask(1), _ask(2), _ask(8)]
    assert place(_ask(2), candidates, held, policy, workload, parse_quantity).node == "b"


def test_no_candidate_with_room_by_its_count_keeps_every_candidate() -> None:
    chosen = place(_ask(4), [node("a", gpus=2)], [], "best-fit", [], parse_quantity)
    assert chosen.node is None
    assert "no candidate" in chosen.why


def test_mig_slices_go_where_fewest_of_that_profile_are_left() -> None:
    slices = {"nvidia.com/mig-1g.10gb": "7"}
    candidates = [node("a", gpus=0, **slices), node("b", gpus=0, **slices)]
    ask = PodAsk(mig={"1g.10gb": 1})
    held = [Held("b", PodAsk(mig={"1g.10gb": 5}))]
    assert place(ask, candidates, held, "best-fit", [], parse_quantity).node == "b"
    full = [Held("b", PodAsk(mig={"1g.10gb": 7}))]
    assert place(ask, candidates, full, "best-fit", [], parse_quantity).node == "a"


def test_priorities_give_the_choice_the_most_and_keep_the_order_of_the_scores() -> None:
    candidates = [node("a"), node("b"), node("c")]
    held = [Held("b", _ask(6)), Held("c", _ask(3))]
    scores = priorities(_ask(1), candidates, held, "best-fit", [], parse_quantity)
    assert scores["b"] == MAX_EXTENDER_PRIORITY
    assert scores["b"] > scores["c"] > scores["a"] == 0


# -- the view: the API's lists and the extender's own recent choices -------------------------------


class ApiDouble:
    """GET /api/v1/nodes and /api/v1/pods as the API server answers them: a List with `items`,
    honouring the phase field selector the view sends; a 403 where told to refuse."""

    address = "https://api.test"
    source = "test"

    def __init__(self, nodes: list[Any], pods: list[Any]) -> None:
        self.nodes, self.pods, self.refuse = nodes, pods, False

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: str | None = None,
        content_type: str | None = None,
    ) -> Reply:
        if self.refuse:
            message = f'pods is forbidden: User "x" cannot list resource "{path}"'
            return Reply(403, {"kind": "Status", "message": message}, message)
        if path == "/api/v1/nodes":
            return Reply(200, {"kind": "NodeList", "items": self.nodes})
        assert path == "/api/v1/pods"
        assert dict(query or []).get("fieldSelector") == LIVE_PODS
        live = [p for p in self.pods if p["status"]["phase"] not in ("Succeeded", "Failed")]
        return Reply(200, {"kind": "PodList", "items": live})


def test_a_choice_counts_until_its_pod_is_bound_and_then_only_once() -> None:
    api = ApiDouble([node("a"), node("b")], [pod("p1"), pod("p2"), pod("p3")])
    view = ClusterView(api, parse_quantity, "best-fit", ManualClock())
    assert view.filter(pod("p1", gpus=6), ["a", "b"]).node == "a"
    # p1 is not bound yet: the extender's own choice holds 6 GPUs of `a`, 4 do not fit there
    assert view.filter(pod("p2", gpus=4), ["a", "b"]).node == "b"
    # both bound now: the bindings count, the choices no more (b keeps 4 GPUs free, not 0)
    api.pods = [pod("p1", gpus=6, node_name="a"), pod("p2", gpus=4, node_name="b"), pod("p3")]
    assert view.filter(pod("p3", gpus=3), ["a", "b"]).node == "b"


def test_a_forged_call_for_a_pod_the_api_does_not_list_steers_nothing() -> None:
    api = ApiDouble([node("a"), node("b")], [pod("real")])
    view = ClusterView(api, parse_quantity, "best-fit", ManualClock())
    assert view.filter(pod("forged", gpus=7), ["a", "b"]).node == "a"
    assert view.filter(pod("real", gpus=2), ["a", "b"]).node == "a"  # `a` is not held by it


def test_a_choice_is_forgotten_after_a_minute_and_finished_pods_hold_nothing() -> None:
    clock = ManualClock()
    done = pod("old", gpus=8, node_name="a", phase="Succeeded")
    api = ApiDouble([node("a"), node("b")], [pod("p1"), pod("p2"), done])
    view = ClusterView(api, parse_quantity, "best-fit", clock)
    assert view.filter(pod("p1", gpus=7), ["a", "b"]).node == "a"  # `old` holds nothing
    clock.advance(ASSUMED_FOR_S + 1)
    assert view.filter(pod("p2", gpus=2), ["a", "b"]).node == "a"  # nor p1's stale choice


def test_an_api_that_refuses_the_list_is_an_error_with_its_reason() -> None:
    api = ApiDouble([node("a")], [])
    api.refuse = True
    view = ClusterView(api, parse_quantity, "best-fit", ManualClock())
    with pytest.raises(KubeApiError, match="403: pods is forbidden"):
        view.filter(pod("p"), ["a"])


def test_each_distinct_quantity_is_read_once_and_an_unreadable_one_every_time() -> None:
    read: list[str] = []

    def counting(text: str) -> Decimal:
        read.append(text)
        return parse_quantity(text)

    pods = [pod(f"p{i}", gpus=1, node_name="a") for i in range(6)]
    view = ClusterView(ApiDouble([node("a"), node("b")], pods), counting, "best-fit", ManualClock())
    assert view.filter(pod("new", gpus=2), ["a", "b"]).node == "a"
    assert view.filter(pod("new", gpus=2), ["a", "b"]).node == "a"  # the same answer, cached
    assert len(read) == len(set(read))  # 7 pods and 2 nodes, twice: each string read once
    broken = pod("broken", gpus=1)
    broken["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "4 cores"
    view = ClusterView(ApiDouble([node("a")], []), counting, "best-fit", ManualClock())
    for _ in range(2):  # a refused quantity is not remembered as read: it stays unreadable
        assert view.filter(broken, ["a"]).why == "the pod's request cannot be read"
    assert read.count("4 cores") == 2


# -- HTTP, as kube-scheduler calls it --------------------------------------------------------------


def _client(api: ApiDouble) -> TestClient:
    view = ClusterView(api, parse_quantity, "best-fit", ManualClock())
    return TestClient(create_extender_app(view), raise_server_exceptions=False)


def test_filter_with_node_names_answers_the_chosen_name_and_why_not_the_others() -> None:
    client = _client(ApiDouble([node("a"), node("b")], [pod("p")]))
    reply = client.post("/filter", json={"Pod": pod("p"), "Nodes": None, "NodeNames": ["b", "a"]})
    assert reply.status_code == 200
    body = reply.json()
    assert body["NodeNames"] == ["a"]
    assert set(body["FailedNodes"]) == {"b"}
    assert "a fits the pod better" in body["FailedNodes"]["b"]
    assert body["Error"] == ""
    assert body["FailedAndUnresolvableNodes"] == {}


def test_filter_with_whole_nodes_answers_whole_nodes() -> None:
    client = _client(ApiDouble([node("a"), node("b")], [pod("p")]))
    items = [node("a"), node("b")]
    reply = client.post("/filter", json={"Pod": pod("p"), "Nodes": {"items": items}})
    assert [n["metadata"]["name"] for n in reply.json()["Nodes"]["items"]] == ["a"]


def test_prioritize_answers_a_host_priority_list() -> None:
    client = _client(ApiDouble([node("a"), node("b")], [pod("p")]))
    reply = client.post("/prioritize", json={"Pod": pod("p"), "NodeNames": ["a", "b"]})
    assert reply.json() == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}]


@pytest.mark.parametrize(
    ("body", "field"), [({"NodeNames": ["a"]}, "Pod"), ({"Pod": "x", "NodeNames": ["a"]}, "Pod")]
)
def test_a_call_kube_scheduler_could_not_have_made_is_refused_with_the_field(
    body: dict[str, Any], field: str
) -> None:
    reply = _client(ApiDouble([node("a")], [])).post("/filter", json=body)
    assert reply.status_code == 422
    assert reply.json()["error"]["code"] == "invalid_request"
    assert reply.json()["error"]["field"] == field


def test_a_body_that_is_not_json_is_refused_as_such() -> None:
    reply = _client(ApiDouble([node("a")], [])).post(
        "/filter", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert reply.status_code == 422
    assert reply.json()["error"]["field"] == "body"


def test_an_api_the_extender_cannot_read_answers_502_so_an_ignorable_extender_is_skipped() -> None:
    api = ApiDouble([node("a")], [])
    api.refuse = True
    reply = _client(api).post("/filter", json={"Pod": pod("p"), "NodeNames": ["a"]})
    assert reply.status_code == 502
    assert reply.json()["error"]["code"] == "kube_api_failed"


def test_an_unreadable_pod_keeps_every_candidate() -> None:
    client = _client(ApiDouble([node("a"), node("b")], []))
    reply = client.post("/filter", json={"Pod": pod("p", cpu="lots"), "NodeNames": ["a", "b"]})
    assert reply.json()["NodeNames"] == ["a", "b"]
    assert reply.json()["FailedNodes"] == {}


def test_quantities_are_read_by_the_kubernetes_client() -> None:
    assert parse_quantity("500m") == Decimal("0.5")
    assert parse_quantity("16Gi") == 16 << 30
