"""The openb variant generator: each family's share is the level asked, seeds reproduce, pods are
well-formed and of the base list's shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.core.trace.variants import (
    FAMILY_LEVELS,
    Variant,
    cpu_only_share,
    generate,
    gpu_request_share,
    is_model_constrained,
    is_multi_gpu,
    variants,
)
from gpuplex.replay.openb import load_nodes, load_pods

OPENB = Path(__file__).resolve().parents[4].parent / "shared" / "data" / "openb"

NODES = [
    TraceNode("g2", 96_000, 786_432, 8, "G2"),
    TraceNode("t4", 104_000, 393_216, 2, "T4"),
    TraceNode("p100", 16_000, 131_072, 2, "P100"),
    TraceNode("cpu", 64_000, 262_144, 0, ""),
]

BASE = [
    TracePod("whole", 8_000, 16_384, 1, 1000),
    TracePod("whole-big", 32_000, 65_536, 1, 1000),  # no P100 node has the CPU for it
    TracePod("share", 4_000, 8_192, 1, 460),
    TracePod("share-small", 2_000, 4_096, 1, 250),
    TracePod("two", 16_000, 32_768, 2, 1000),
    TracePod("eight", 88_000, 327_680, 8, 1000),  # only a G2 node holds it
    TracePod("etl", 12_000, 24_576, 0, 0),
    TracePod("etl-small", 2_000, 4_096, 0, 0),
]

#: what each family's level is a share of, and of which pods
MEASURES = {
    "gpushare": lambda pods: gpu_request_share(pods, lambda p: p.is_shared),
    "multigpu": lambda pods: gpu_request_share(pods, is_multi_gpu),
    "gpuspec": lambda pods: gpu_request_share(pods, is_model_constrained),
    "cpuonly": cpu_only_share,
}


def shape(pod: TracePod) -> tuple[int, int, int, int]:
    return (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli)


def base_list(size: int) -> list[TracePod]:
    """`size` pods cycling through BASE's shapes, each with its own name."""
    return [
        TracePod(f"b{i:04d}", p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli)
        for i, p in ((i, BASE[i % len(BASE)]) for i in range(size))
    ]


def tolerance(pods: list[TracePod], family: str) -> float:
    """One pod's worth: the largest GPU request over all of it, or one pod of the count."""
    if family == "cpuonly":
        return 1 / len(pods)
    total = sum(p.total_gpu_milli for p in pods)
    return max(p.total_gpu_milli for p in pods) / total


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v.name)
def test_each_familys_share_is_the_level_asked(variant: Variant) -> None:
    pods = generate(base_list(2_000), NODES, variant, seed=3)
    share = MEASURES[variant.family](pods)
    assert share == pytest.approx(variant.level, abs=tolerance(pods, variant.family))


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v.name)
def test_pods_are_well_formed_and_of_the_base_shapes(variant: Variant) -> None:
    base = base_list(800)
    pods = generate(base, NODES, variant, seed=5)
    assert len({p.name for p in pods}) == len(pods)
    assert all(p.name.startswith(f"{variant.name}-pod-") for p in pods)
    assert {shape(p) for p in pods} <= {shape(p) for p in base}
    for pod in pods:
        assert pod.num_gpu <= 1 or pod.gpu_milli == 1000
        for model in pod.gpu_models:  # a model some node of which can hold the pod
            assert any(
                n.model == model and n.gpus >= pod.num_gpu and n.cpu_milli >= pod.cpu_milli
                for n in NODES
            )
    if variant.family == "cpuonly":  # every GPU pod of the base list, CPU-only pods added
        assert [shape(p) for p in pods if p.wants_gpu] == [shape(p) for p in base if p.wants_gpu]
    else:  # the list's size; CPU-only pods as they were
        assert len(pods) == len(base)
        assert [shape(p) for p in pods if not p.wants_gpu] == [
            shape(p) for p in base if not p.wants_gpu
        ]


def test_model_bound_pods_favour_no_model_by_its_size_alone() -> None:
    pods = generate(base_list(4_000), NODES, Variant("gpuspec", 0.5), seed=1)
    bound = [p for p in pods if p.gpu_models]
    assert all(len(p.gpu_models) == 1 for p in bound)
    assert {p.gpu_models[0] for p in bound} == {"G2", "T4", "P100"}
    eight = [p for p in bound if p.num_gpu == 8]
    assert eight
    assert {p.gpu_models for p in eight} == {("G2",)}  # the only model with 8-GPU nodes
    # weighted by the square root of each model's GPUs: 8 G2 GPUs against 2 T4 and 2 P100
    # gives 2:1:1 (by GPU count it would be 4:1:1)
    small = [p for p in base_list(6_000) if p.num_gpu == 1 and p.cpu_milli <= 8_000]
    models = [p.gpu_models[0] for p in generate(small, NODES, Variant("gpuspec", 1.0), seed=2)]
    assert models.count("G2") / models.count("T4") == pytest.approx(2.0, rel=0.1)
    assert models.count("P100") / models.count("T4") == pytest.approx(1.0, rel=0.1)


def test_the_same_seed_gives_the_same_pods_and_another_seed_others() -> None:
    base = base_list(500)
    for variant in (Variant("gpushare", 0.6), Variant("gpuspec", 0.2), Variant("cpuonly", 0.05)):
        first = generate(base, NODES, variant, seed=11)
        assert generate(base, NODES, variant, seed=11) == first
        assert generate(base, NODES, variant, seed=12) != first


def test_levels_at_the_ends_and_bad_requests() -> None:
    base = base_list(400)
    assert MEASURES["gpushare"](generate(base, NODES, Variant("gpushare", 1.0), 0)) == 1.0
    assert MEASURES["multigpu"](generate(base, NODES, Variant("multigpu", 0.0), 0)) == 0.0
    assert cpu_only_share(generate(base, NODES, Variant("cpuonly", 0.0), 0)) == 0.0
    with pytest.raises(ValueError, match="unknown variant family 'cpu'"):
        variants(["cpu"])
    with pytest.raises(ValueError, match="unknown variant family"):
        generate(base, NODES, Variant("nope", 0.5), 0)
    with pytest.raises(ValueError, match=r"a share in \[0, 1\]"):
        generate(base, NODES, Variant("gpushare", 1.5), 0)
    with pytest.raises(ValueError, match="below 1"):
        generate(base, NODES, Variant("cpuonly", 1.0), 0)
    with pytest.raises(ValueError, match="lacks the pods"):
        generate([p for p in base if not p.is_shared], NODES, Variant("gpushare", 0.4), 0)


def test_every_family_has_a_few_levels_in_order() -> None:
    assert set(FAMILY_LEVELS) == set(MEASURES)
    for levels in FAMILY_LEVELS.values():
        assert len(levels) >= 3
        assert list(levels) == sorted(levels)
        assert all(0 < level <= 1 for level in levels)


@pytest.mark.skipif(not OPENB.is_dir(), reason=f"the openb trace is not at {OPENB}")
def test_on_openb_every_variant_has_its_share() -> None:
    base = load_pods(OPENB / "openb_pod_list_default.csv")
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    for variant in variants():
        pods = generate(base, nodes, variant, seed=0)
        share = MEASURES[variant.family](pods)
        assert share == pytest.approx(variant.level, abs=tolerance(pods, variant.family)), variant
