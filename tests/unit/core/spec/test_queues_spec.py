"""`queues:` in gpuplex.yaml: problems with their field path, and the tree the admission rules
read (kinds, inherited preemption rules, the fleet's capacity)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.queues.tree import PreemptionRules, queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.queues import JobCaps, WithinQueue
from gpuplex.core.spec.quota_kinds import GPUS, MIG_PREFIX

FLEET = {
    "nodes": [
        {"name": "n0", "gpus": [{"model": "H100-80GB", "count": 4, "mig": "off"}]},
        {"name": "n1", "gpus": [{"model": "A100-80GB", "count": 2, "mig": "on"}]},
    ]
}
TENANTS = [{"name": "contoso"}, {"name": "fabrikam"}, {"name": "adatum"}]


def spec(organisations: list[dict[str, Any]], **queues: Any) -> dict[str, Any]:
    return {
        "fleet": FLEET,
        "tenants": TENANTS,
        "queues": {"organisations": organisations, **queues},
    }


def org(*teams: dict[str, Any], name: str = "acme", **fields: Any) -> dict[str, Any]:
    return {"name": name, "teams": list(teams), **fields}


def team(*tenants: dict[str, Any], name: str = "research", **fields: Any) -> dict[str, Any]:
    return {"name": name, "tenants": list(tenants), **fields}


def leaf(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


PATH = ("queues", "organisations", 0, "teams", 0, "tenants")

CASES: list[tuple[str, dict[str, Any], tuple[str | int, ...], str]] = [
    (
        "unknown tenant",
        spec([org(team(leaf("contosso")))]),
        (*PATH, 0, "name"),
        "unknown tenant 'contosso' (did you mean \"contoso\"?)",
    ),
    (
        "tenant twice",
        spec([org(team(leaf("contoso")), team(leaf("contoso"), name="ops"))]),
        ("queues", "organisations", 0, "teams", 1, "tenants", 0, "name"),
        "is in more than one team",
    ),
    (
        "name clash",
        spec([org(team(leaf("contoso"), name="acme"))]),
        ("queues", "organisations", 0, "teams", 0, "name"),
        "queue name 'acme' is used twice (also at queues.organisations.0)",
    ),
    (
        "limit below guarantee",
        spec([org(team(leaf("contoso", guarantee={"gpus": 2}, limit={"gpus": 1})))]),
        (*PATH, 0, "limit", "gpus"),
        "the limit (1) is below the guarantee (2)",
    ),
    (
        "children above parent",
        spec(
            [
                org(
                    team(
                        leaf("contoso", guarantee={"gpus": 2}),
                        leaf("fabrikam", guarantee={"gpus": 2}),
                        guarantee={"gpus": 3},
                    )
                )
            ]
        ),
        PATH,
        "the guarantees below 'research' add up to 4 GPUs, more than its own guarantee of 3",
    ),
    (
        "profile",
        spec([org(team(leaf("contoso", guarantee={"mig": {"1g.10gbb": 1}})))]),
        (*PATH, 0, "guarantee", "mig", "1g.10gbb"),
        "unknown MIG profile '1g.10gbb'",
    ),
    (
        "typo",
        spec([org(team(leaf("contoso", gurantee={"gpus": 1})))]),
        (*PATH, 0, "gurantee"),
        'did you mean "guarantee"',
    ),
    (
        "within queue",
        spec([org(team(leaf("contoso")))], preemption={"within_queue": "lower"}),
        ("queues", "preemption", "within_queue"),
        "lower_priority",
    ),
    (
        "negative half-life",
        spec([org(team(leaf("contoso")))], fair_sharing={"half_life_s": -1}),
        ("queues", "fair_sharing", "half_life_s"),
        "greater than or equal to 0",
    ),
    (
        "half-life past a year",
        spec([org(team(leaf("contoso")))], fair_sharing={"half_life_s": 400 * 86_400}),
        ("queues", "fair_sharing", "half_life_s"),
        "less than or equal to 31536000",
    ),
    (
        "half-life as text",
        spec([org(team(leaf("contoso")))], fair_sharing={"half_life_s": "1d"}),
        ("queues", "fair_sharing", "half_life_s", "float"),  # as min_runtime_s says it
        "Input should be a valid number",
    ),
    (
        "fair sharing typo",
        spec([org(team(leaf("contoso")))], fair_sharing={"halflife_s": 60}),
        ("queues", "fair_sharing", "halflife_s"),
        'did you mean "half_life_s"',
    ),
]


def test_the_half_life_is_a_day_unless_queues_say_otherwise() -> None:
    default = validate_spec(spec([org(team(leaf("contoso")))]))
    assert isinstance(default, GpuplexSpec), default
    tree = queue_tree(default)
    assert tree is not None
    assert tree.half_life_s == 86_400
    hour = validate_spec(spec([org(team(leaf("contoso")))], fair_sharing={"half_life_s": 3600}))
    assert isinstance(hour, GpuplexSpec), hour
    assert (tree := queue_tree(hour)) is not None
    assert tree.half_life_s == 3600


@pytest.mark.parametrize(("label", "data", "path", "message"), CASES, ids=[c[0] for c in CASES])
def test_problems_name_the_field(
    label: str, data: dict[str, Any], path: tuple[str | int, ...], message: str
) -> None:
    got = validate_spec(data)
    assert isinstance(got, list), f"{label}: expected problems"
    matching = [p for p in got if tuple(p.path) == path]
    assert matching, f"{label}: no problem at {path}; got {[(p.path, p.message) for p in got]}"
    assert any(message in p.message for p in matching), [p.message for p in matching]


def test_the_tree_has_the_kinds_the_inherited_rules_and_the_fleets_capacity() -> None:
    data = spec(
        [
            org(
                team(
                    leaf("contoso", guarantee={"gpus": 2, "mig": {"1g.10gb": 3}}, weight=3),
                    leaf("fabrikam", lend=False, preemption={"grace_s": 5}),
                    guarantee={"gpus": 3, "mig": {"1g.10gb": 4}},
                    preemption={"within_queue": "never"},
                ),
                guarantee={"gpus": 4},
                limit={"gpus": 6},
            ),
            org(team(leaf("adatum"), name="ops"), name="globex", borrow=False),
        ],
        preemption={"min_runtime_s": 60},
    )
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    tree = queue_tree(parsed)
    assert tree is not None
    # 4 whole H100s; 2 A100s with mig on: 7 x 1g.10gb each
    assert tree.capacity[GPUS] == 4.0
    assert tree.capacity[MIG_PREFIX + "1g.10gb"] == 14.0
    contoso = tree.tenant("contoso")
    fabrikam = tree.tenant("fabrikam")
    assert contoso is not None
    assert fabrikam is not None
    assert contoso.guarantee == {GPUS: 2.0, MIG_PREFIX + "1g.10gb": 3.0}
    assert contoso.weight == 3.0
    assert contoso.preemption == PreemptionRules(True, WithinQueue.NEVER, 60.0, 30.0)
    assert fabrikam.preemption == PreemptionRules(True, WithinQueue.NEVER, 60.0, 5.0)
    assert not fabrikam.lends
    assert [q.name for q in tree.paths["adatum"]] == ["cluster", "globex", "ops", "adatum"]
    assert not tree.paths["adatum"][1].borrows
    assert tree.paths["contoso"][1].limit == {GPUS: 6.0}


def test_no_queues_no_tree() -> None:
    parsed = validate_spec({"fleet": FLEET, "tenants": TENANTS})
    assert isinstance(parsed, GpuplexSpec)
    assert queue_tree(parsed) is None


def test_job_caps_are_the_tenants_own_else_the_queues_else_the_defaults() -> None:
    default = validate_spec(spec([org(team(leaf("contoso"), leaf("fabrikam")))]))
    assert isinstance(default, GpuplexSpec)
    assert default.queues.job_caps_of("contoso") == JobCaps(1000, 600)
    capped = validate_spec(
        spec(
            [
                org(
                    team(
                        leaf("contoso", max_active_jobs=5),
                        leaf("fabrikam", max_submits_per_minute=7),
                    )
                )
            ],
            max_active_jobs=50,
            max_submits_per_minute=60,
        )
    )
    assert isinstance(capped, GpuplexSpec)
    assert capped.queues.job_caps_of("contoso") == JobCaps(5, 60)
    assert capped.queues.job_caps_of("fabrikam") == JobCaps(50, 7)
    closed = validate_spec(spec([org(team(leaf("contoso", max_active_jobs=0)))]))
    assert isinstance(closed, GpuplexSpec)
    assert closed.queues.job_caps_of("contoso").max_active == 0


@pytest.mark.parametrize("field", ["max_active_jobs", "max_submits_per_minute"])
@pytest.mark.parametrize("value", [-1, 1_000_001, 1.5, True])
def test_job_caps_out_of_range_name_the_field(field: str, value: object) -> None:
    problems = validate_spec(spec([org(team(leaf("contoso")))], **{field: value}))
    assert isinstance(problems, list)
    assert [p.path for p in problems] == [("queues", field)]
    leaf_problems = validate_spec(spec([org(team(leaf("contoso", **{field: value})))]))
    assert isinstance(leaf_problems, list)
    assert [p.path for p in leaf_problems] == [(*PATH, 0, field)]
