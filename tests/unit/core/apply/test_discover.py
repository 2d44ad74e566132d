"""fleet.discover: the driver's GPUs become the fleet's node, and the spec is checked against them."""

from __future__ import annotations

from gpuplex.core.apply.discover import discovered_node, with_discovered_fleet
from gpuplex.core.apply.model import GpuStatus
from gpuplex.core.spec import GpuplexSpec, NodeSpec, validate_spec
from gpuplex.core.spec.fleet import MigModeSpec


def _gpu(index: int, model: str = "H100-80GB", mig: bool = False) -> GpuStatus:
    return GpuStatus(
        index=index, uuid=f"GPU-{index}", model=model, memory_mib=81559, mig_enabled=mig
    )


def _spec(workload_gpu: dict[str, object]) -> GpuplexSpec:
    data = {
        "fleet": {"discover": True},
        "tenants": [
            {"name": "t", "workloads": [{"name": "w", "gpu": workload_gpu, "command": ["x"]}]}
        ],
    }
    result = validate_spec(data)
    assert isinstance(result, GpuplexSpec), result
    return result


def test_gpus_are_grouped_in_index_order_with_their_uuids_and_mig_mode() -> None:
    node = discovered_node("box", [_gpu(2, mig=True), _gpu(0), _gpu(1), _gpu(3, "L4")])
    assert isinstance(node, NodeSpec)
    assert [(g.model, g.count, g.uuids, g.mig) for g in node.gpus] == [
        ("H100-80GB", 2, ["GPU-0", "GPU-1"], MigModeSpec.OFF),
        ("H100-80GB", 1, ["GPU-2"], MigModeSpec.ON),
        ("L4", 1, ["GPU-3"], MigModeSpec.OFF),
    ]


def test_an_unknown_card_or_no_card_is_a_problem_naming_what_to_do() -> None:
    problems = discovered_node("box", [_gpu(0, "NVIDIA Mystery 7")])
    assert isinstance(problems, list)
    assert "GPU 0 is a 'NVIDIA Mystery 7'" in problems[0].message
    assert "fleet.nodes" in problems[0].message
    empty = discovered_node("box", [])
    assert isinstance(empty, list)
    assert "no GPU" in empty[0].message


def test_the_filled_spec_is_checked_against_the_gpus_found() -> None:
    node = discovered_node("box", [_gpu(0)])
    assert isinstance(node, NodeSpec)
    fits = with_discovered_fleet(_spec({"count": 1}), node)
    assert isinstance(fits, GpuplexSpec)
    assert fits.fleet.nodes[0].name == "box"
    too_big = with_discovered_fleet(_spec({"count": 2}), node)
    assert isinstance(too_big, list)
    assert too_big, "two whole GPUs cannot fit a one-GPU host"
