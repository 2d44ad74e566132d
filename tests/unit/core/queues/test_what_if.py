"""The what-if file of `gpuplex queues`: validation with field paths, conversion to the one queue
model (times, replicas, work stopping, past usage), and answers that are the admission round's."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.queues.admission import admit
from gpuplex.core.queues.usage import decayed_seconds
from gpuplex.core.queues.what_if import NOW_S, WhatIf, WhatIfReport, evaluate, parse_what_if
from gpuplex.core.spec.quota_kinds import GPUS, MIG_PREFIX
from gpuplex.errors import SpecProblem


def two_tenants(**changes: Any) -> dict[str, Any]:
    """8 GPUs and 7 MIG slices; alpha guaranteed 4 GPUs, beta nothing."""
    data: dict[str, Any] = {
        "capacity": {"gpus": 8, "mig": {"1g.10gb": 7}},
        "queues": {
            "preemption": {"min_runtime_s": 60},
            "fair_sharing": {"half_life_s": 3600},
            "organisations": [
                {
                    "name": "acme",
                    "teams": [
                        {
                            "name": "ml",
                            "tenants": [
                                {"name": "alpha", "guarantee": {"gpus": 4}},
                                {"name": "beta", "limit": {"gpus": 6}},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    data.update(changes)
    return data


def what_if(data: dict[str, Any]) -> WhatIf:
    result = parse_what_if(data)
    assert isinstance(result, WhatIf), result
    return result


def problems(data: object) -> dict[str, str]:
    result = parse_what_if(data)
    assert isinstance(result, list), "expected problems, got a what-if"
    return {p.dotted_path: p.message for p in result}


def report(data: dict[str, Any]) -> WhatIfReport:
    return evaluate(what_if(data))


def test_the_file_becomes_the_one_queue_model() -> None:
    got = what_if(
        two_tenants(
            running=[
                {"name": "b1", "tenant": "beta", "holds": {"gpus": 6}, "running_s": 600},
                {
                    "name": "srv",
                    "tenant": "alpha",
                    "holds": {"mig": {"1g.10gb": 2}},
                    "replica": True,
                },
            ],
            pending=[{"name": "a1", "tenant": "alpha", "asks": {"gpus": 3}, "waiting_s": 45}],
            past=[{"tenant": "beta", "held": {"gpus": 2}, "from_s_ago": 7200, "until_s_ago": 3600}],
        )
    )
    assert got.tree.capacity == {GPUS: 8.0, MIG_PREFIX + "1g.10gb": 7.0}
    assert got.tree.half_life_s == 3600
    assert got.tree.tenant_names() == ["alpha", "beta"]
    b1, srv = got.holdings
    assert (b1.started_s, b1.preemptible, b1.resources) == (NOW_S - 600, True, {GPUS: 6.0})
    assert (srv.preemptible, srv.resources) == (False, {MIG_PREFIX + "1g.10gb": 2.0})
    (a1,) = got.queued
    assert (a1.id, a1.submitted_s, a1.ask) == ("a1", NOW_S - 45, {GPUS: 3.0})
    # beta's usage: its running job for 600 s and two past hours ago; the replica is no job
    expected = 6 * decayed_seconds(-600, None, 0, 3600) + 2 * decayed_seconds(-7200, -3600, 0, 3600)
    assert got.usage["beta"][GPUS] == pytest.approx(expected)
    assert "alpha" not in got.usage


def test_each_answer_is_the_admission_rounds_own() -> None:
    data = two_tenants(
        running=[
            {"name": f"b{i}", "tenant": "beta", "holds": {"gpus": 2}, "running_s": 600 + i}
            for i in range(3)
        ]
        + [{"name": "a0", "tenant": "alpha", "holds": {"gpus": 2}, "running_s": 10}],
        pending=[
            {"name": "claim", "tenant": "alpha", "asks": {"gpus": 2}, "waiting_s": 5},
            {"name": "more", "tenant": "beta", "asks": {"gpus": 1}, "waiting_s": 50},
            {"name": "slice", "tenant": "beta", "asks": {"mig": {"1g.10gb": 1}}, "waiting_s": 99},
        ],
    )
    got = what_if(data)
    decision = admit(got.tree, got.holdings, got.queued, NOW_S, usage=got.usage)
    answers = {a.job.id: a for a in evaluate(got).pending}
    assert answers["claim"].outcome == "preempts"
    assert answers["claim"].victims == (("b0", "beta"),)  # the youngest of beta's borrowed work
    assert answers["claim"].reason == decision.waiting["claim"]
    assert answers["more"].outcome == "waits"
    assert answers["more"].reason == decision.waiting["more"]
    assert answers["slice"].outcome == "starts"
    assert "slice" in decision.admitted


def test_work_already_stopping_for_a_claim_is_waited_for_and_nothing_more_is_preempted() -> None:
    data = two_tenants(
        running=[
            {"name": "b1", "tenant": "beta", "holds": {"gpus": 6}, "running_s": 600},
            {
                "name": "b2",
                "tenant": "beta",
                "holds": {"gpus": 2},
                "running_s": 600,
                "stopping_for": "claim",
            },
        ],
        pending=[{"name": "claim", "tenant": "alpha", "asks": {"gpus": 2}}],
    )
    (answer,) = report(data).pending
    assert answer.outcome == "waits"
    assert answer.reason.startswith("waiting for the work preempted for it to stop")
    assert answer.reserved == {GPUS: 2.0}


def test_a_replica_is_never_preempted() -> None:
    data = two_tenants(
        running=[{"name": "srv", "tenant": "beta", "holds": {"gpus": 6}, "replica": True}],
        pending=[{"name": "claim", "tenant": "alpha", "asks": {"gpus": 4}}],
    )
    (answer,) = report(data).pending
    assert answer.outcome == "waits"
    assert answer.reason == "next to start: waiting for 2 GPUs to free (capacity is held for it)"


def test_the_queue_rows_stand_as_the_dashboard_shows_them_with_past_use_and_fair_shares() -> None:
    data = two_tenants(
        running=[{"name": "b1", "tenant": "beta", "holds": {"gpus": 6}, "running_s": 3600}],
        pending=[{"name": "a1", "tenant": "alpha", "asks": {"gpus": 8}}],
    )
    rows = {row.standing.name: row for row in report(data).queues}
    assert list(rows) == ["cluster", "acme", "ml", "alpha", "beta"]
    beta = rows["beta"]
    assert {k.kind: k.in_use for k in beta.standing.kinds} == {GPUS: 6.0}
    assert beta.past_use[GPUS] == pytest.approx(3.0)  # 6 GPUs for one half-life: half of 6
    assert rows["acme"].past_use == {}
    # demands: alpha 8, beta 6 (capped by its limit of 6); alpha's guarantee 4 first, then the
    # other 4 shared: beta reaches 2 more when alpha does
    assert rows["alpha"].fair_share[GPUS] == pytest.approx(6.0)
    assert rows["beta"].fair_share[GPUS] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("changes", "where", "says"),
    [
        (
            {"pending": [{"name": "x", "tenant": "ml", "asks": {"gpus": 1}}]},
            "pending[0].tenant",
            "'ml' is a team or an organisation, not a tenant of queues:",
        ),
        (
            {"pending": [{"name": "x", "tenant": "alhpa", "asks": {"gpus": 1}}]},
            "pending[0].tenant",
            "'alhpa' is no tenant of queues: (did you mean \"alpha\"?); tenants: alpha, beta",
        ),
        (
            {
                "running": [{"name": "x", "tenant": "beta", "holds": {"gpus": 1}}],
                "pending": [{"name": "x", "tenant": "alpha", "asks": {"gpus": 1}}],
            },
            "pending[0].name",
            "'x' is already at running[0]: names are unique",
        ),
        (
            {"pending": [{"name": "x", "tenant": "alpha", "asks": {}}]},
            "pending[0].asks",
            "it holds or asks nothing: give an amount",
        ),
        (
            {"running": [{"name": "x", "tenant": "beta", "holds": {"gpus": 9}}]},
            "running",
            "the running workloads hold 9 GPUs, more than the capacity of 8",
        ),
        (
            {"past": [{"tenant": "beta", "held": {"gpus": 1}, "from_s_ago": 5, "until_s_ago": 9}]},
            "past[0].until_s_ago",
            "it ends (9 s ago) before it starts (5 s ago)",
        ),
        (
            {"queues": {"organisations": []}},
            "queues.organisations",
            "no tenant's queue: add an organisation with a team and a tenant",
        ),
        (
            {"queues": {"fair_sharing": {"half_life_s": -1}, "organisations": []}},
            "queues.fair_sharing.half_life_s",
            "Input should be greater than or equal to 0",
        ),
        (
            {"capacity": {"gpus": 8, "cpus": 4}},
            "capacity.cpus",
            "unknown key 'cpus' (did you mean \"gpus\"?)",
        ),
    ],
)
def test_problems_name_their_field(changes: dict[str, Any], where: str, says: str) -> None:
    found = problems(two_tenants(**changes))
    assert where in found, found
    assert says in found[where]


def test_an_empty_or_odd_file_says_what_it_expected() -> None:
    assert problems(None) == {
        "(document)": "the file is empty: expected capacity, queues, running, pending"
    }
    assert "expected a mapping" in problems([1, 2])["(document)"]
    bad = problems({"capacity": {"gpus": 1}})
    assert bad == {"queues": "required field is missing"}
    empty = parse_what_if({})
    assert isinstance(empty, list)
    assert all(isinstance(p, SpecProblem) for p in empty)
