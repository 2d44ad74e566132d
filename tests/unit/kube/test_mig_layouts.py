"""MIG layouts are checked against the catalog's geometry before they are rendered, and the rules
checker used by the other tests catches what the GPU operator would refuse."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.plan import GpuView, MigSlicePlan, Mode
from gpuplex.errors import KubeRenderError
from gpuplex.kube.node_config import node_config
from tests.unit.kube.gpu_operator_rules import (
    device_plugin_problems,
    layout_fit_problems,
    mig_parted_problems,
)
from tests.unit.kube.test_node_config import _gpu, _h100, _node, _occupant, _plan, _slice, _spec

SPEC = _spec(_node("n", _h100(1)))


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (
            _gpu("n", 0, Mode.MIG, *[_slice("a", "1g.10gb", s, r) for r, s in enumerate(range(8))]),
            "is not a valid place",  # slot 7 is never a start
        ),
        (
            _gpu("n", 0, Mode.MIG, _slice("a", "3g.40gb", 0), _slice("b", "3g.40gb", 0)),
            "3g.40gb slice at memory slot 0 is not a valid place",
        ),
        (
            _gpu(
                "n",
                0,
                Mode.MIG,
                _occupant(
                    "a",
                    memory_mib=4864,
                    mig=MigSlicePlan(profile="1g.5gb", profile_id=19, start_slot=0, size_slots=1),
                ),
            ),
            "planned MIG profile '1g.5gb', which H100-80GB does not have (it has 1g.10gb,",
        ),
        (
            _gpu("n", 0, Mode.MIG, _occupant("a", memory_mib=1000)),
            "t/a#0 has no MIG slice on a GPU in MIG mode",
        ),
        (
            _gpu("n", 0, Mode.MIG, _slice("a", "1g.10gb+me", 0), _slice("b", "1g.10gb+me", 1)),
            "does not fit the GPU (2 x 1g.10gb+me, at most 1)",
        ),
    ],
)
def test_a_layout_the_gpu_cannot_hold_is_refused(gpu: GpuView, expected: str) -> None:
    with pytest.raises(KubeRenderError, match="node n GPU 0 \\(H100-80GB\\): ") as caught:
        node_config(SPEC, _plan(SPEC, gpu))
    assert expected in str(caught.value)


def test_mig_slices_on_a_model_without_mig_are_refused() -> None:
    spec = _spec(_node("n", {"model": "L40S"}))
    gpu = _gpu("n", 0, Mode.MIG, _slice("a", "1g.10gb", 0)).model_copy(update={"model": "L40S"})
    with pytest.raises(KubeRenderError, match="model without MIG in the catalog"):
        node_config(spec, _plan(spec, gpu))


# --- the checker finds what the operator refuses ---------------------------------------------


def _shared(method: str, replicas: Any, **extra: Any) -> dict[str, Any]:
    return {
        "version": "v1",
        "flags": {"migStrategy": "none", "mpsRoot": "/run/nvidia/mps"},
        "sharing": {
            method: {
                "renameByDefault": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": replicas}],
                **extra,
            }
        },
    }


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (_shared("timeSlicing", 1), "number of replicas must be >= 2"),
        (_shared("mps", True), "number of replicas must be >= 2"),
        (_shared("mps", 4, gpus=1), "mps: unknown key 'gpus'"),
        ({**_shared("mps", 4), "flags": {"migStrategy": "mixed"}}, "mps with migStrategy mixed"),
        ({**_shared("mps", 4), "flags": {"migStrategy": "none"}}, "mps without flags.mpsRoot"),
        (
            {"version": "v1", "sharing": {**_shared("mps", 2)["sharing"], "timeSlicing": {}}},
            "mutually exclusive",
        ),
        ({"version": "v2"}, "not 'v1'"),
        ({"version": "v1", "flags": {"migStrategy": "auto"}}, "migStrategy 'auto'"),
    ],
)
def test_the_checker_finds_device_plugin_configs_the_plugin_refuses(
    config: dict[str, Any], problem: str
) -> None:
    assert any(problem in p for p in device_plugin_problems(config))


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ({"devices": "some", "mig-enabled": False}, "devices must be"),
        ({"devices": [0, 0], "mig-enabled": False}, "devices must be"),
        ({"devices": "all", "mig-enabled": True}, "mig-enabled without mig-devices"),
        ({"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}, "disabled"),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}, "all counts"),
        ({"devices": "all", "mig-enabled": True, "mig-devices": {"big": 1}}, "grammar"),
        ({"devices": "all", "mig-enabled": "yes"}, "true or false"),
    ],
)
def test_the_checker_finds_mig_parted_entries_mig_parted_refuses(
    entry: dict[str, Any], problem: str
) -> None:
    document = {"version": "v1", "mig-configs": {"x": [entry]}}
    assert any(problem in p for p in mig_parted_problems(document))


def test_the_checker_finds_layouts_the_gpu_cannot_hold() -> None:
    layout = [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.5gb": 1, "3g.40gb": 3}}]
    problems = layout_fit_problems(layout, ["H100-80GB"], "n")
    assert problems == [
        "n: GPU 0: 1g.5gb is not a H100-80GB profile",
        "n: GPU 0: 3 x 3g.40gb > 2",
        "n: GPU 0: 9 compute / 12 memory slices",
    ]
    assert layout_fit_problems(layout, ["L4"], "n") == ["n: GPU 0 (L4) has no MIG"]
