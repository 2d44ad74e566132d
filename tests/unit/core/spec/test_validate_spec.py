"""validate_spec: shape and cross-field rules give problems with the field path (pure, no files)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.spec import GpuplexSpec, validate_spec

FLEET = {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 2}]}]}


def doc(*tenants: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"fleet": FLEET, "tenants": list(tenants), **top}


def one(name: str = "t", **workload: Any) -> dict[str, Any]:
    return {"name": name, "workloads": [{"name": "w", **workload}]}


def base(owner: str = "owner", **fields: Any) -> dict[str, Any]:
    serve = {"model": "b", "accepts_adapters": True}
    return {
        "name": owner,
        **fields,
        "workloads": [{"name": "base", "gpu": {"count": 1}, "serve": serve}],
    }


def rider(**fields: Any) -> dict[str, Any]:
    return {
        "name": "rider",
        **fields,
        "workloads": [{"name": "lora", "serve": {"model": "r", "lora_of": "owner/base"}}],
    }


LORA = ("tenants", 1, "workloads", 0, "serve", "lora_of")
L4_ONLY = {"nodes": [{"name": "n0", "gpus": [{"model": "L4"}]}]}
ALL_MIG = {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "mig": "on"}]}]}

CASES: list[tuple[str, object, tuple[str | int, ...], str]] = [
    ("empty", None, (), "empty"),
    ("list at top", [1, 2], (), "expected a mapping"),
    ("typo", {"fleet": FLEET, "tenant": []}, ("tenant",), 'did you mean "tenants"'),
    (
        "bad enum",
        doc({"name": "t", "isolation": "migg"}),
        ("tenants", 0, "isolation"),
        'did you mean "mig"',
    ),
    (
        "model",
        {"fleet": {"nodes": [{"name": "n", "gpus": [{"model": "H100"}]}]}},
        ("fleet", "nodes", 0, "gpus", 0, "model"),
        "unknown GPU model",
    ),
    (
        "profile",
        doc(one(gpu={"mig_profile": "3g.20gb"})),
        ("tenants", 0, "workloads", 0, "gpu", "mig_profile"),
        "exists on no candidate GPU",
    ),
    (
        "too big",
        doc(one(gpu={"memory_gib": 200})),
        ("tenants", 0, "workloads", 0, "gpu", "memory_gib"),
        "more than the largest",
    ),
    (
        "too many",
        doc(one(gpu={"count": 3})),
        ("tenants", 0, "workloads", 0, "gpu", "count"),
        "no node has more than 2",
    ),
    (
        "quota",
        doc({**one(gpu={"count": 1}, replicas=2), "quota": {"gpus": 1}}),
        ("tenants", 0, "quota", "gpus"),
        "over the quota",
    ),
    (
        "dup tenant",
        doc(one(gpu={"count": 1}), one(gpu={"count": 1})),
        ("tenants", 1, "name"),
        "duplicate tenant",
    ),
    ("dns", doc(one("Bad_Name", gpu={"count": 1})), ("tenants", 0, "name"), "DNS-1123"),
    (
        "workload named like a job",
        doc({"name": "t", "workloads": [{"name": "job-j00000001", "gpu": {"count": 1}}]}),
        ("tenants", 0, "workloads", 0, "name"),
        "starts with 'job-', which is reserved for the workloads jobs run as",
    ),
    (
        "lora",
        doc(one(serve={"model": "m", "lora_of": "x/y"})),
        ("tenants", 0, "workloads", 0, "serve", "lora_of"),
        "does not name a workload",
    ),
    ("no gpu", doc(one()), ("tenants", 0, "workloads", 0, "gpu"), "required"),
    (
        "two forms",
        doc(one(gpu={"count": 1, "memory_gib": 3})),
        ("tenants", 0, "workloads", 0, "gpu"),
        "exactly one",
    ),
    (
        "pool",
        doc(one(gpu={"count": 1}, pool="gold")),
        ("tenants", 0, "workloads", 0, "pool"),
        "no GPU is in pool",
    ),
    (
        "price",
        {"fleet": FLEET, "pricing": {"gpu_hour": {"H100": "2"}}},
        ("pricing", "gpu_hour", "H100"),
        "unknown GPU model 'H100' (did you mean \"H100-80GB\"?)",
    ),
    (
        "lora on itself",
        doc({"name": "t", "workloads": [{"name": "w", "serve": {"model": "m", "lora_of": "t/w"}}]}),
        ("tenants", 0, "workloads", 0, "serve", "lora_of"),
        "names this workload itself",
    ),
    (
        "gpu model typo",
        doc(one(gpu={"count": 1, "model": "H100"})),
        ("tenants", 0, "workloads", 0, "gpu", "model"),
        'did you mean "H100-80GB"',
    ),
    (
        "gpu model not in pool",
        doc(one(gpu={"count": 1, "model": "L4"})),
        ("tenants", 0, "workloads", 0, "gpu", "model"),
        "no L4 in this workload's pool; models there: H100-80GB",
    ),
    (
        "lora chain",
        doc(
            base(),
            rider(requirement="moderate"),
            {
                "name": "leaf",
                "requirement": "moderate",
                "workloads": [{"name": "l", "serve": {"model": "x", "lora_of": "rider/lora"}}],
            },
        ),
        ("tenants", 2, "workloads", 0, "serve", "lora_of"),
        "is itself an adapter",
    ),
    (
        "lora into regulated base",
        doc(base(regulated=True), rider(requirement="moderate")),
        LORA,
        "cannot host other tenants",
    ),
    (
        "lora into exclusive base",
        doc(base(exclusive_gpus=True), rider(requirement="moderate")),
        LORA,
        "cannot host other tenants",
    ),
    ("lora from standard tier", doc(base(), rider()), LORA, "needs its own GPUs"),
    ("lora from mig tenant", doc(base(), rider(isolation="mig")), LORA, "needs its own GPUs"),
    (
        "mig on a card without",
        {"fleet": L4_ONLY, "tenants": [one(gpu={"memory_gib": 4}) | {"isolation": "mig"}]},
        ("tenants", 0, "workloads", 0, "gpu"),
        "no GPU in this workload's pool can run MIG",
    ),
    (
        "mig too big",
        doc(one(gpu={"memory_gib": 79.9}) | {"isolation": "mig"}),
        ("tenants", 0, "workloads", 0, "gpu", "memory_gib"),
        "fits no MIG profile",
    ),
    (
        "mps on mig-only",
        {"fleet": ALL_MIG, "tenants": [one(gpu={"memory_gib": 4}) | {"isolation": "mps"}]},
        ("tenants", 0, "workloads", 0, "gpu"),
        "every GPU in this workload's pool has mig: on",
    ),
    (
        "negative mig quota",
        doc({"name": "t", "quota": {"mig": {"3g.40gb": -1}}}),
        ("tenants", 0, "quota", "mig", "3g.40gb"),
        "greater than or equal to 0",
    ),
    (
        "hard with timeslice",
        doc({"name": "t", "regulated": True, "isolation": "timeslice"}),
        ("tenants", 0, "isolation"),
        "needs hardware isolation",
    ),
    *[
        (
            f"reads {folder!r}",
            doc(one(gpu={"count": 1}, command=["x"], reads=["/models/a", folder])),
            ("tenants", 0, "workloads", 0, "reads", 1),
            words,
        )
        for folder, words in [
            ("models/b", "not an absolute path"),
            ("/", "name one folder below /"),
            ("/models/../etc", "write '/etc'"),
            ("/models/b/", "write '/models/b'"),
            ("/models//b", "write '/models/b'"),
        ]
    ],
    (
        "reads on a workload that runs nothing",
        doc(one(gpu={"count": 1}, reads=["/models/a"])),
        ("tenants", 0, "workloads", 0, "reads"),
        "grant them on the workload whose command reads them",
    ),
]


@pytest.mark.parametrize(
    ("data", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_problem_names_the_field(data: object, path: tuple[str | int, ...], words: str) -> None:
    result = validate_spec(data)
    assert isinstance(result, list), "expected problems"
    matching = [p for p in result if p.path == path]
    assert matching, [(p.path, p.message) for p in result]
    assert words in matching[0].message


def test_a_good_spec_is_returned_typed() -> None:
    result = validate_spec(doc(one(gpu={"mig_profile": "3g.40gb"}, replicas=2)))
    assert isinstance(result, GpuplexSpec)
    assert result.tenants[0].workloads[0].replicas == 2


def test_all_problems_come_at_once() -> None:
    result = validate_spec(doc(one(gpu={"count": 3}), one("u", gpu={"memory_gib": 500})))
    assert isinstance(result, list)
    assert len(result) == 2


def test_a_moderate_tenant_may_ride_a_consenting_base() -> None:
    assert isinstance(validate_spec(doc(base(), rider(requirement="moderate"))), GpuplexSpec)


def test_suggestions_do_not_depend_on_hash_order() -> None:
    """Several pools share the prefix; the hint must be the same in every process."""
    pooled = {
        "nodes": [
            {"name": f"n{p}", "pool": p, "gpus": [{"model": "L4"}]}
            for p in ("gpu-b", "gpu-a", "gpu-c")
        ]
    }
    result = validate_spec({"fleet": pooled, "tenants": [one(gpu={"count": 1}, pool="gpu")]})
    assert isinstance(result, list)
    assert 'did you mean "gpu-a"' in result[0].message


@pytest.mark.parametrize("job_id", ["j00000001", "jffffffff", "x"])
def test_no_workload_of_the_spec_may_take_a_name_the_job_runner_gives(job_id: str) -> None:
    """Jobs are found in a plan, the host's status and the log folder by their workload's name, so
    each name `job_workload_name` makes is refused in a spec, and a name just beside it is not."""
    taken = job_workload_name(job_id)
    refused = validate_spec(doc({"name": "t", "workloads": [{"name": taken, "gpu": {"count": 1}}]}))
    assert isinstance(refused, list)
    assert [(p.path, taken in p.message) for p in refused] == [
        (("tenants", 0, "workloads", 0, "name"), True)
    ]
    beside = f"jobs-{job_id}"
    kept = validate_spec(doc({"name": "t", "workloads": [{"name": beside, "gpu": {"count": 1}}]}))
    assert isinstance(kept, GpuplexSpec), kept
