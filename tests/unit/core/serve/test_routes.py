"""The routing table from a spec: own models, LoRA adapters on a shared base, overrides."""

from __future__ import annotations

from gpuplex.core.serve.routes import route_table
from gpuplex.specfile import load_spec_text

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 2}]}]
tenants:
  - name: base
    isolation: mps
    requirement: moderate
    workloads:
      - name: llama
        gpu: {memory_gib: 40}
        replicas: 2
        serve: {model: llama, base_model: meta/llama-3-8b, accepts_adapters: true, port: 9000}
  - name: acme
    isolation: mps
    requirement: moderate
    weight: 3
    rate_limits: {tokens_per_min: 1000}
    workloads:
      - name: support
        serve: {model: support-bot, lora_of: base/llama}
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: chat, port: 9100}
gateway:
  backends: {acme/chat: ["http://10.0.0.5:9100"]}
"""


def test_routes_per_tenant_with_adapters_and_overrides() -> None:
    spec = load_spec_text(SPEC, source="t.yaml")
    table = route_table(spec, "127.0.0.1", spec.gateway.backends)
    assert table.backends["base/llama"].urls == ("http://127.0.0.1:9000", "http://127.0.0.1:9001")
    assert table.backends["acme/chat"].urls == ("http://10.0.0.5:9100",)
    own = table.route("base", "llama")
    assert own is not None
    assert own.upstream_model == "meta/llama-3-8b"
    adapter = table.route("acme", "support-bot")
    assert adapter is not None
    assert (adapter.backend_id, adapter.upstream_model, adapter.adapter) == (
        "base/llama",
        "acme/support",
        True,
    )
    assert table.route("acme", "llama") is None  # another tenant's model is not acme's
    assert table.models_of("acme") == ["chat", "support-bot"]
    assert table.tenants["acme"].weight == 3
