"""The kube-scheduler extender's HTTP face (`gpuplex kube extender`): the `filter` and `prioritize`
verbs of KubeSchedulerConfiguration's `extenders`, answering as kube-scheduler decodes them.

kube-scheduler POSTs `ExtenderArgs` (Go field names, no JSON tags: `Pod`, `Nodes`, `NodeNames`) and
reads `ExtenderFilterResult` (`NodeNames` or `Nodes`, `FailedNodes`, `FailedAndUnresolvableNodes`,
`Error`) or a `HostPriorityList` (`[{"Host": ..., "Score": 0..10}]`).

- `filter` narrows the candidates to the node the policy chooses (as HAMi's extender does), so the
  placement is exactly the simulator's; the others are reported as failed with the reason. When
  the extender keeps every candidate (a pod asking no GPU it places, or no candidate with room by
  its count) kube-scheduler decides as it would without it.
- `prioritize` scores every candidate 0..10 instead, for a configuration that lets
  kube-scheduler's own scores weigh in (`mode: score`).

Anything kube-scheduler could not have sent answers 422 with gpuplex's JSON error body; an API
server that cannot be read answers 502/503. kube-scheduler treats every non-200 as the extender
failing, and skips it when it is `ignorable` (how gpuplex renders it).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from gpuplex.kube.extender_view import ClusterView
from gpuplex.server.problems import install_handlers


class ExtenderArgs(BaseModel):
    """extenderv1.ExtenderArgs as kube-scheduler encodes it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    pod: dict[str, Any] = Field(alias="Pod")
    nodes: dict[str, Any] | None = Field(default=None, alias="Nodes")
    node_names: list[str] | None = Field(default=None, alias="NodeNames")

    def candidates(self) -> list[str]:
        if self.node_names is not None:
            return list(self.node_names)
        items = (self.nodes or {}).get("items") or []
        return [
            str(item["metadata"]["name"])
            for item in items
            if isinstance(item, dict) and (item.get("metadata") or {}).get("name")
        ]


def create_extender_app(view: ClusterView) -> FastAPI:
    app = FastAPI(
        title="gpuplex scheduler extender", docs_url=None, redoc_url=None, openapi_url=None
    )
    install_handlers(app)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "policy": view.policy}

    @app.post("/filter")
    def filter_nodes(args: ExtenderArgs) -> dict[str, Any]:
        names = args.candidates()
        chosen = view.filter(args.pod, names)
        kept = names if chosen.node is None or chosen.node not in names else [chosen.node]
        failed = {
            name: f"gpuplex: {chosen.node} fits the pod better ({chosen.why})"
            for name in names
            if name not in kept
        }
        result: dict[str, Any] = {
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
        if args.node_names is not None:
            result["NodeNames"] = kept
        else:
            items = (args.nodes or {}).get("items") or []
            result["Nodes"] = {
                "items": [
                    item
                    for item in items
                    if isinstance(item, dict) and (item.get("metadata") or {}).get("name") in kept
                ]
            }
        return result

    @app.post("/prioritize")
    def prioritize(args: ExtenderArgs) -> list[dict[str, Any]]:
        scores = view.prioritize(args.pod, args.candidates())
        return [{"Host": name, "Score": score} for name, score in scores.items()]

    return app
