"""A tenant whose LoRA adapter rides on another tenant's model server pays its share of that server,
by tokens, through the real roll-up and statement; the GPU map and the tenants list show it."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from gpuplex.core.serve.usage import UsageRecord
from tests.integration.server.conftest import SPEC_YAML, T0, TENANT_A, TENANT_B, Api

HOUR = timedelta(hours=1)
PERIOD = "2026-03"
#: alphaco's chat server takes adapters; bravoco's only workload is an adapter on it.
SHARED_SPEC = SPEC_YAML.replace(
    "        serve: {model: alphaco-chat, port: 18500}",
    "        serve: {model: alphaco-chat, base_model: llama-3.1-8b-instruct, "
    "accepts_adapters: true, port: 18500}",
).replace(
    """      - name: embed
        gpu: {memory_gib: 20, compute_percent: 50}
        serve: {model: bravoco-embed, port: 18600}""",
    """      - name: legal
        serve: {model: bravoco-legal, lora_of: alphaco/chat}""",
)


def _record(n: int, tenant: str, model: str, tokens: int) -> UsageRecord:
    return UsageRecord(
        request_id=f"req-{n}",
        tenant=tenant,
        key_prefix="gp_test",
        model=model,
        endpoint="chat.completions",
        status=200,
        prompt_tokens=tokens // 4,
        completion_tokens=tokens - tokens // 4,
        latency_s=0.2,
        started_at=T0 + timedelta(minutes=5, seconds=n),
    )


def _gpu_amount(statement: dict[str, Any]) -> Decimal:
    return sum(
        (Decimal(line["amount"]) for line in statement["lines"] if line["unit"] == "gpu_hour"),
        Decimal(0),
    )


def test_a_rider_pays_its_token_share_of_the_server_it_rides_on(api: Api) -> None:
    api.apply(SHARED_SPEC)
    api.ctx.usage.insert_many(
        [_record(1, TENANT_B, "bravoco-legal", 3000), _record(2, TENANT_A, "alphaco-chat", 1000)]
    )
    api.clock.advance(2 * HOUR)
    reply = api.post(
        "/meter/rollup", json={"start": T0.isoformat(), "end": (T0 + HOUR).isoformat()}
    )
    assert reply.status_code == 200, reply.text

    usage = api.get(
        f"/tenants/{TENANT_B}/usage",
        params={"start": T0.isoformat(), "end": (T0 + HOUR).isoformat(), "metric": "gpu_seconds"},
    ).json()["points"]
    # the one minute with traffic: half a GPU x 60 s, split 3:1 by tokens
    assert [(p["dimension"], Decimal(p["quantity"])) for p in usage] == [
        ("H100-80GB/mps", Decimal("22.5"))
    ]
    fleet = api.get(f"/statements/{PERIOD}").json()
    by_tenant = {s["tenant"]: s for s in fleet["tenants"]}
    rider, owner = _gpu_amount(by_tenant[TENANT_B]), _gpu_amount(by_tenant[TENANT_A])
    # 22.5 GPU-seconds at 3.60/h = 0.0225; the server's hour (half a GPU) cost 1.80 in all
    assert rider in (Decimal("0.02"), Decimal("0.03"))
    assert rider + owner == Decimal("1.80")
    assert by_tenant[TENANT_B]["total"] == str(rider)

    tenants = {t["name"]: t for t in api.get("/tenants").json()["items"]}
    assert tenants[TENANT_B]["rides_on"] == ["alphaco/chat"]
    assert tenants[TENANT_A]["rides_on"] == []

    nodes = api.get("/nodes").json()
    occupants = [o for n in nodes["nodes"] for g in n["gpus"] for o in g["occupants"]]
    [host] = [o for o in occupants if (o["tenant"], o["workload"]) == (TENANT_A, "chat")]
    assert host["riders"] == [
        {"tenant": TENANT_B, "workload": "legal", "model": "bravoco-legal", "token_share": 0.75}
    ]
    # a tenant-scoped caller sees no other tenant riding on its server
    scoped = api.get("/nodes", "a-viewer").json()
    assert all(
        o["riders"] == [] for n in scoped["nodes"] for g in n["gpus"] for o in g["occupants"]
    )
