"""What requests ask and planned replicas hold against the queues; the plan's replicas are never
preempted by jobs, and they count against their tenant's limit."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.jobs.holdings import plan_holdings, request_ask
from gpuplex.core.plan import make_plan
from gpuplex.core.queues.admission import QueuedJob, admit
from gpuplex.core.queues.tree import queue_tree
from gpuplex.core.spec import GpuplexSpec, GpuRequestSpec, validate_spec
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX


@pytest.mark.parametrize(
    ("request_fields", "ask"),
    [
        ({"count": 2}, {GPUS: 2.0}),
        ({"mig_profile": "1g.10gb"}, {MIG_PREFIX + "1g.10gb": 1.0}),
        ({"memory_gib": 12.5}, {GPU_MEMORY_GIB: 12.5}),
        (
            {"memory_gib": 20.0, "compute_percent": 30},
            {GPU_MEMORY_GIB: 20.0, COMPUTE_PERCENT: 30.0},
        ),
    ],
)
def test_each_request_form_asks_its_own_kind(
    request_fields: dict[str, Any], ask: dict[str, float]
) -> None:
    assert request_ask(GpuRequestSpec(**request_fields)) == ask


def spec() -> GpuplexSpec:
    data = {
        "fleet": {
            "nodes": [
                {"name": "n0", "gpus": [{"model": "H100-80GB", "count": 4, "mig": "off"}]},
                {"name": "n1", "gpus": [{"model": "A100-80GB", "count": 1, "mig": "on"}]},
            ]
        },
        "tenants": [
            {
                "name": "contoso",
                "isolation": "dedicated",
                "workloads": [{"name": "chat", "gpu": {"count": 1}, "replicas": 2}],
            },
            {
                "name": "adatum",
                "isolation": "mig",
                "workloads": [{"name": "embed", "gpu": {"mig_profile": "1g.10gb"}}],
            },
        ],
        "queues": {
            "organisations": [
                {
                    "name": "acme",
                    "teams": [
                        {
                            "name": "research",
                            "tenants": [
                                {"name": "contoso", "guarantee": {"gpus": 1}, "limit": {"gpus": 3}},
                                {"name": "adatum"},
                            ],
                        }
                    ],
                }
            ]
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


def test_the_plans_replicas_hold_what_they_were_given_and_are_never_preempted() -> None:
    applied = spec()
    holdings = plan_holdings(make_plan(applied))
    by_id = {h.id: h for h in holdings}
    assert by_id["contoso/chat/0"].resources == {GPUS: 1.0}
    assert by_id["adatum/embed/0"].resources == {MIG_PREFIX + "1g.10gb": 1.0}
    assert not any(h.preemptible for h in holdings)
    tree = queue_tree(applied)
    assert tree is not None
    # contoso's two replicas count against its limit of 3: one more GPU, not two
    jobs = [
        QueuedJob("one", "contoso", {GPUS: 1.0}, submitted_s=1.0),
        QueuedJob("two", "contoso", {GPUS: 1.0}, submitted_s=2.0),
    ]
    decision = admit(tree, holdings, jobs, now_s=10_000.0)
    assert decision.admitted == ("one",)
    assert decision.waiting["two"] == "contoso would pass its limit: 3 GPUs held + 1 asked > 3"
    assert decision.evictions == ()
    # adatum (no guarantee) borrowing the last two GPUs is fine; contoso's replicas stay put
    grab = [QueuedJob("grab", "adatum", {GPUS: 2.0}, submitted_s=3.0)]
    assert admit(tree, holdings, grab, now_s=10_000.0).admitted == ("grab",)
