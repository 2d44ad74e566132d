"""`explain` of a LoRA adapter: its isolation is its host server's (it has no slice of its own), it
says which server it rides on and where its requests go, and who pays for it."""

from __future__ import annotations

from pathlib import Path

from gpuplex.core.plan import make_plan
from gpuplex.core.plan.explain import explain
from gpuplex.specfile import load_spec_file, load_spec_text

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "saas-single-server.yaml"


def test_a_rider_says_it_rides_on_its_host_and_where_requests_go() -> None:
    spec = load_spec_file(EXAMPLE)
    plan = make_plan(spec)
    lines = explain(spec, plan, "adatum", "legal-lora")
    hosts = sorted(
        (p.replica, p.node, p.gpu_indices)
        for p in plan.placements
        if (p.tenant, p.workload) == ("contoso", "support-bot")
    )
    assert len(hosts) == 2
    assert lines[1] == "isolation: mig, the host server's: it has no GPU or slice of its own"
    assert lines[2] == "rides on contoso/support-bot (LoRA adapter on base llama-3.1-8b-instruct)"
    where = ", ".join(f"#{r} on {node} GPU {gpus[0]}" for r, node, gpus in hosts)
    assert lines[3] == (
        f"requests for 'adatum-legal' are routed to contoso/support-bot's replicas ({where}) "
        "as model adatum/legal-lora"
    )
    assert lines[4].startswith("billing: adatum pays its share of contoso/support-bot's GPU time")
    assert not any(line.startswith("replica ") for line in lines)  # no placement of its own


def test_a_host_without_replicas_says_the_requests_fail() -> None:
    spec = load_spec_text(
        EXAMPLE.read_text().replace(
            "        replicas: 2\n        serve: {model: contoso-support",
            "        replicas: 0\n        serve: {model: contoso-support",
        ),
        source="test",
    )
    lines = explain(spec, make_plan(spec), "adatum", "legal-lora")
    assert "none: the host has no replica placed, so these requests fail" in lines[3]


def test_a_server_keeps_its_own_isolation_line() -> None:
    spec = load_spec_file(EXAMPLE)
    lines = explain(spec, make_plan(spec), "contoso", "support-bot")
    assert lines[1].startswith("isolation: mig because ")
