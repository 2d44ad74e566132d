"""PriorityClasses: one per distinct tenant priority, ordered as the spec orders tenants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.priorities import priority_classes
from gpuplex.specfile import load_spec_file
from tests.unit.kube.schema import assert_valid

EXAMPLES = Path(__file__).parents[3] / "examples"


def spec_with(priorities: dict[str, int], preemption: bool = True) -> GpuplexSpec:
    tenants: list[dict[str, Any]] = [
        {"name": name, "priority": priority} for name, priority in priorities.items()
    ]
    return GpuplexSpec.model_validate({"tenants": tenants, "policy": {"preemption": preemption}})


@pytest.mark.parametrize(
    "name", ["saas-single-server", "enterprise-cluster", "host-demo", "laptop"]
)
def test_examples_render_schema_valid_classes(name: str) -> None:
    spec = load_spec_file(EXAMPLES / f"{name}.yaml")
    classes = priority_classes(spec)
    assert_valid(classes)
    assert len(classes) == len({t.priority for t in spec.tenants})
    assert priority_classes(spec) == classes


def test_enterprise_classes_are_ordered_and_named_by_priority() -> None:
    classes = priority_classes(load_spec_file(EXAMPLES / "enterprise-cluster.yaml"))
    assert [(c["metadata"]["name"], c["value"]) for c in classes] == [
        ("gpuplex-priority-500", 100_500),
        ("gpuplex-priority-300", 100_300),
        ("gpuplex-priority-100", 100_100),
        ("gpuplex-priority-0", 100_000),
        ("gpuplex-priority-minus-100", 99_900),
    ]
    assert classes[-1]["description"] == "gpuplex tenant priority -100: tenant notebooks"
    for manifest in classes:
        assert manifest["apiVersion"] == "scheduling.k8s.io/v1"
        assert "namespace" not in manifest["metadata"]
        assert manifest["metadata"]["labels"] == {
            "app.kubernetes.io/managed-by": "gpuplex",
            "gpuplex.dev/set": "plan",
        }


def test_tenants_of_equal_priority_share_one_class() -> None:
    classes = priority_classes(spec_with({"a": 5, "b": 7, "c": 5, "d": -3}))
    assert [c["metadata"]["name"] for c in classes] == [
        "gpuplex-priority-7",
        "gpuplex-priority-5",
        "gpuplex-priority-minus-3",
    ]
    assert classes[1]["description"] == "gpuplex tenant priority 5: tenants a, c"
    assert [c["value"] for c in classes] == sorted((c["value"] for c in classes), reverse=True)
    assert all(c["value"] > 0 for c in classes)  # above pods with no class at all


@pytest.mark.parametrize(
    ("preemption", "policy"), [(True, "PreemptLowerPriority"), (False, "Never")]
)
def test_preemption_policy_follows_the_spec(preemption: bool, policy: str) -> None:
    classes = priority_classes(spec_with({"a": 1, "b": 2}, preemption=preemption))
    assert_valid(classes)
    assert {c["preemptionPolicy"] for c in classes} == {policy}
    assert {c["globalDefault"] for c in classes} == {False}


def test_no_tenants_no_classes() -> None:
    assert priority_classes(GpuplexSpec()) == []
