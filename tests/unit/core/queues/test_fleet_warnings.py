"""Queues whose guarantees add up to more than the fleet holds are valid, with a warning placed on
the guarantee that takes the sum past the fleet, per kind and at the highest level of the tree
that passes it; `gpuplex validate` and `plan` print it with file:line:column and the field path,
and still exit 0."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.queues.fleet_warnings import guarantee_warnings
from gpuplex.core.spec import GpuplexSpec
from gpuplex.specfile import load_spec_text, locate_in_file
from tests.e2e.cli_runs import run_in_process

FLEET = {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 2, "mig": "off"}]}]}
TENANTS: list[dict[str, Any]] = [
    {"name": name, "workloads": []} for name in ("acme", "globex", "initech")
]


def spec(organisations: list[dict[str, Any]]) -> GpuplexSpec:
    return GpuplexSpec.model_validate(
        {"fleet": FLEET, "tenants": TENANTS, "queues": {"organisations": organisations}}
    )


def org(name: str, tenants: list[dict[str, Any]], **guarantee: Any) -> dict[str, Any]:
    team = {"name": f"{name}-team", "tenants": tenants}
    return {"name": name, "guarantee": guarantee, "teams": [team]}


def leaf(name: str, **guarantee: Any) -> dict[str, Any]:
    return {"name": name, "guarantee": guarantee}


@pytest.mark.parametrize(
    ("organisations", "expected"),
    [
        pytest.param(
            [org("a", [leaf("acme", gpus=1), leaf("globex", gpus=1)])], [], id="fits-exactly"
        ),
        pytest.param(
            [org("a", [leaf("acme", gpus=1), leaf("globex", gpus=1), leaf("initech", gpus=1)])],
            [
                (
                    "queues.organisations[0].teams[0].tenants[2].guarantee.gpus",
                    "the tenants' guarantees add up to 3 GPUs, more than the fleet holds (2 GPUs)",
                )
            ],
            id="tenants-past-the-fleet-on-the-one-that-tips-it",
        ),
        pytest.param(
            [org("a", [leaf("acme", gpus=1)], gpus=2), org("b", [leaf("globex")], gpus=1)],
            [
                (
                    "queues.organisations[1].guarantee.gpus",
                    "the organisations' guarantees add up to 3 GPUs, more than the fleet holds "
                    "(2 GPUs)",
                )
            ],
            id="organisations-said-once",
        ),
        pytest.param(
            [org("a", [leaf("acme", gpu_memory_gib=100), leaf("globex", gpu_memory_gib=100)])],
            [
                (
                    "queues.organisations[0].teams[0].tenants[1].guarantee.gpu_memory_gib",
                    "the tenants' guarantees add up to 200 GiB of GPU memory, more than the "
                    "fleet holds (159.295 GiB of GPU memory)",
                )
            ],
            id="memory",
        ),
        pytest.param(
            [org("a", [leaf("acme", mig={"1g.10gb": 1})])],
            [
                (
                    "queues.organisations[0].teams[0].tenants[0].guarantee.mig.1g.10gb",
                    "the tenants' guarantees add up to 1 MIG 1g.10gb slice, more than the fleet "
                    "holds (0 MIG 1g.10gb slices)",
                )
            ],
            id="a-mig-slice-on-a-fleet-without-mig",
        ),
    ],
)
def test_guarantees_past_the_fleet_are_a_warning_on_the_field(
    organisations: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    warnings = guarantee_warnings(spec(organisations))
    assert [(w.dotted_path, w.message.split(":")[0]) for w in warnings] == expected


def test_a_spec_without_queues_has_no_warning() -> None:
    assert (
        guarantee_warnings(GpuplexSpec.model_validate({"fleet": FLEET, "tenants": TENANTS})) == []
    )


SPEC_FILE = """\
version: 1
fleet:
  nodes:
    - name: box
      gpus:
        - {model: H100-80GB, count: 2, mig: "off"}
tenants:
  - {name: acme, workloads: []}
  - {name: globex, workloads: []}
queues:
  organisations:
    - name: a
      teams:
        - name: t
          tenants:
            - name: acme
              guarantee: {gpus: 2}
            - name: globex
              guarantee:
                gpus: 1
"""


def test_the_warning_is_placed_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(SPEC_FILE)
    [warning] = locate_in_file(path, guarantee_warnings(load_spec_text(SPEC_FILE, source="x")))
    assert (warning.line, warning.column) == (20, 17)  # `gpus: 1` under globex's guarantee


@pytest.mark.parametrize("command", ["validate", "plan"])
def test_validate_and_plan_print_it_and_exit_0(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(SPEC_FILE)
    result = run_in_process([command, str(path)], monkeypatch, capsys)
    assert result.exit_code == 0, result.output
    assert (
        f"warning: {path}:20:17: queues.organisations[0].teams[0].tenants[1].guarantee.gpus: "
        "the tenants' guarantees add up to 3 GPUs, more than the fleet holds (2 GPUs)"
    ) in " ".join(result.stderr.split())
