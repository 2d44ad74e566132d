"""desired_host: from a spec and its plan to what one server runs; port_clashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.apply.desired import desired_host, port_clashes
from gpuplex.core.apply.model import DesiredHost
from gpuplex.core.plan import make_plan
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import GpuplexSpec
from gpuplex.specfile import load_spec_file
from tests.unit.core.apply.factories import binding, host, wanted
from tests.unit.core.plan.factories import fleet, spec, tenant, workload

EXAMPLE = Path(__file__).parents[4] / "examples" / "saas-single-server.yaml"


@pytest.fixture(scope="module")
def example() -> GpuplexSpec:
    return load_spec_file(EXAMPLE)


def test_example_replicas_bindings_and_commands(example: GpuplexSpec) -> None:
    plan = make_plan(example)
    desired = desired_host(example, plan, "h100-a")
    assert desired.node == "h100-a"
    assert desired.notes == []
    by_label = {w.label: w for w in desired.workloads}
    assert sorted(by_label) == sorted(p.label() for p in plan.placements)
    specs = {(t.name, w.name): w for t in example.tenants for w in t.workloads}
    for placement in plan.placements:
        got = by_label[placement.label()]
        source = specs[(placement.tenant, placement.workload)]
        assert got.binding.mode is placement.mode
        assert got.binding.gpu_indices == placement.gpu_indices
        assert got.binding.mig == placement.mig
        assert got.binding.memory_mib == placement.memory_mib
        assert got.binding.thread_percent == placement.thread_percent
        assert source.command is not None
        filled = str(got.port) if got.port is not None else ""
        assert got.argv == [arg.replace("{port}", filled) for arg in source.command]
        assert "{port}" not in " ".join(got.argv)
        assert got.image is None  # the process runtime runs commands
        assert got.restart == source.restart
        expected_port = source.serve.port + placement.replica if source.serve else None
        assert got.port == expected_port
    chat = by_label["northwind/chat-70b#0"]
    assert (chat.binding.gpu_indices, chat.health_port) == ([0, 1], 8000)
    assert by_label["fabrikam/claims-extractor#1"].port is None


def test_example_gpus_say_mig_slices_and_mps(example: GpuplexSpec) -> None:
    plan = make_plan(example)
    desired = desired_host(example, plan, "h100-a")
    assert [g.index for g in desired.gpus] == [v.index for v in plan.gpus]
    views = {v.index: v for v in plan.gpus}
    for gpu in desired.gpus:
        view = views[gpu.index]
        assert gpu.model == "H100-80GB"
        assert gpu.mps == (view.mode is Mode.MPS)
        if view.mode is Mode.MIG:
            assert gpu.mig_slices is not None
            assert sorted(s.start_slot for s in gpu.mig_slices) == sorted(
                o.mig.start_slot for o in view.occupants if o.mig is not None
            )
            assert len(gpu.mig_slices) == len(view.occupants)
        else:
            assert gpu.mig_slices is None
    assert any(g.mig_slices for g in desired.gpus)
    assert any(g.mps for g in desired.gpus)


def two_nodes(**host: Any) -> GpuplexSpec:
    return spec(
        fleet({"model": "H100-80GB", "count": 1, "mig": "off"}, nodes=2),
        tenant(
            "acme",
            workload(
                "api",
                {"count": 1},
                replicas=2,
                serve={"model": "m", "port": 9000},
                health={"port": 9100},
                command=["serve", "--port={port}", "--id", "r{replica}", "{port}{replica}"],
                env={"PORT": "{port}", "MEM": "{memory_mib}", "THREADS": "{thread_percent}"},
            ),
            unix_user="acme",
        ),
        policy={"placement": "spread"},
        **({"host": host} if host else {}),
    )


def test_only_this_nodes_replicas_with_placeholders_filled() -> None:
    document = two_nodes()
    plan = make_plan(document)
    seen: list[str] = []
    for node in ("n0", "n1"):
        desired = desired_host(document, plan, node)
        [api] = desired.workloads
        placement = next(p for p in plan.placements if p.label() == api.label)
        assert placement.node == node
        r = api.replica
        seen.append(api.label)
        assert api.port == 9000 + r
        assert api.health_port == 9100 + r
        assert api.argv == ["serve", f"--port={9000 + r}", "--id", f"r{r}", f"{9000 + r}{r}"]
        assert api.env == {
            "PORT": str(9000 + r),
            "MEM": str(placement.memory_mib),
            "THREADS": "100",
        }
        assert api.unix_user == "acme"
        assert [g.index for g in desired.gpus] == [0]
    assert sorted(seen) == ["acme/api#0", "acme/api#1"]
    assert desired_host(document, plan, "elsewhere") == DesiredHost(
        node="elsewhere", gpus=[], workloads=[], notes=[]
    )


@pytest.mark.parametrize(
    ("runtime", "runs_image"),
    [("process", False), ("docker", True), ("podman", True)],
)
def test_workloads_without_a_command_are_noted(runtime: str, runs_image: bool) -> None:
    document = spec(
        fleet({"model": "H100-80GB", "count": 2, "mig": "off"}),
        tenant(
            "acme",
            workload("bare", {"count": 1}),
            workload("boxed", {"count": 1}, image="repo/boxed:1"),
        ),
        host={"runtime": runtime},
    )
    desired = desired_host(document, make_plan(document), "n0")
    labels = [w.label for w in desired.workloads]
    assert "acme/bare#0" not in labels
    assert any(n.startswith("acme/bare#0: no command") for n in desired.notes)
    assert ("acme/boxed#0" in labels) == runs_image
    assert any(n.startswith("acme/boxed#0") for n in desired.notes) == (not runs_image)
    if runs_image:
        [boxed] = desired.workloads
        assert (boxed.image, boxed.argv) == ("repo/boxed:1", [])


def test_port_clashes_names_both_replicas() -> None:
    a = wanted("a", binding(Mode.TIMESLICE, 0), port=8000)
    b = wanted("b", binding(Mode.TIMESLICE, 0), port=7999, replica=1, health_port=8000)
    c = wanted("c", binding(Mode.TIMESLICE, 0), port=8001, health_port=8001)
    [clash] = port_clashes(host([], [a, b, c]))
    assert clash.startswith("port 8000 is used by acme/a#0, acme/b#1")


def test_no_clash_for_distinct_ports_or_a_replicas_own_health_port() -> None:
    a = wanted("a", binding(Mode.TIMESLICE, 0), port=8000, health_port=8000)
    b = wanted("a", binding(Mode.TIMESLICE, 0), port=8001, health_port=8001, replica=1)
    c = wanted("c", binding(Mode.TIMESLICE, 0))
    assert port_clashes(host([], [a, b, c])) == []


def test_port_clashes_of_a_planned_spec() -> None:
    document = spec(
        fleet({"model": "H100-80GB", "count": 2, "mig": "off"}),
        tenant(
            "acme",
            workload("one", {"count": 1}, serve={"model": "a"}, command=["x"]),
            workload("two", {"count": 1}, serve={"model": "b", "port": 8000}, command=["y"]),
        ),
    )
    clashes = port_clashes(desired_host(document, make_plan(document), "n0"))
    assert len(clashes) == 1
    assert "acme/one#0" in clashes[0]
    assert "acme/two#0" in clashes[0]


def test_placements_no_longer_in_the_spec_are_noted() -> None:
    before = spec(
        fleet({"model": "H100-80GB", "count": 2, "mig": "off"}),
        tenant("acme", workload("a", {"count": 1}, command=["a"])),
        tenant("gone", workload("b", {"count": 1}, command=["b"])),
    )
    after = spec(
        fleet({"model": "H100-80GB", "count": 2, "mig": "off"}),
        tenant("acme", workload("a", {"count": 1}, command=["a"])),
    )
    desired = desired_host(after, make_plan(before), "n0")
    assert [w.label for w in desired.workloads] == ["acme/a#0"]
    assert desired.notes == ["gone/b#0: not in the spec any more"]
