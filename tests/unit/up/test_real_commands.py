"""On simulated GPUs `gpuplex up` runs a stand-in for each command unless told to run it for real
(`--real-commands`, `--real TENANT/WORKLOAD`), and its banner says which is which."""

from __future__ import annotations

import io

from rich.console import Console

from gpuplex.core.plan import make_plan
from gpuplex.specfile import load_spec_text
from gpuplex.up.banner import UpBanner, print_banner
from gpuplex.up.simulate import runs_for_real, simulated_spec, unknown_real

SPEC = """
version: 1
fleet:
  nodes:
    - name: box
      gpus: [{model: H100-80GB, count: 2}]
tenants:
  - name: acme
    workloads:
      - name: chat
        gpu: {count: 1}
        serve: {model: acme-chat, accepts_adapters: true, port: 9000}
        command: [/opt/vllm/bin/python, -m, vllm.entrypoints.openai.api_server, --port, "{port}"]
        reads: [/models/base, /adapters/acme]
      - name: train
        kind: batch
        gpu: {count: 1}
        command: [python, -m, train]
  - name: bolt
    requirement: moderate
    workloads:
      - name: lora
        serve: {model: bolt-chat, lora_of: acme/chat}
"""


def test_a_real_workload_keeps_its_command_and_grants_and_the_others_get_stand_ins() -> None:
    spec = load_spec_text(SPEC, source="gpuplex.yaml")
    ran = simulated_spec(spec, make_plan(spec), "/usr/bin/python3", real={"acme/chat"})
    chat, train = ran.tenants[0].workloads
    assert chat == spec.tenants[0].workloads[0]  # as the spec says: reads included
    assert train.command is not None
    assert train.command[:3] == ["/usr/bin/python3", "-m", "gpuplex.sim.workload"]
    assert ran.tenants[1].workloads == spec.tenants[1].workloads  # a rider runs nothing


def test_a_stand_in_reads_none_of_the_folders_granted_to_the_command_it_replaces() -> None:
    spec = load_spec_text(SPEC, source="gpuplex.yaml")
    chat = simulated_spec(spec, make_plan(spec), "/usr/bin/python3").tenants[0].workloads[0]
    assert chat.command is not None
    assert chat.command[:5] == ["/usr/bin/python3", "-m", "gpuplex.cli", "sim", "model"]
    assert "bolt/lora" in chat.command  # the adapter riding on it, as the gateway names it
    assert chat.reads == []


def test_what_runs_for_real_and_what_is_a_stand_in() -> None:
    spec = load_spec_text(SPEC, source="gpuplex.yaml")
    assert runs_for_real(spec, ()) == ([], ["acme/chat", "acme/train"])
    assert runs_for_real(spec, ("acme/chat",)) == (["acme/chat"], ["acme/train"])
    assert runs_for_real(spec, None) == (["acme/chat", "acme/train"], [])
    assert unknown_real(spec, ["acme/chat"]) == []
    assert unknown_real(spec, ["acme/chta", "bolt/lora"]) == [
        "acme/chta is no workload of the spec (with a command: acme/chat, acme/train)",
        "bolt/lora has no command to run (a LoRA adapter rides on its base)",
    ]


def test_the_banner_says_what_runs_for_real_and_what_is_a_stand_in() -> None:
    out = io.StringIO()
    banner = UpBanner(
        how="2 simulated GPUs (simulated driver)",
        server_url="http://127.0.0.1:8090",
        gateway_url="http://127.0.0.1:8080",
        admin_token="gpt_x",  # noqa: S106 - not a secret
        viewer_tenant=None,
        viewer_token=None,
        keys=[],
        real_commands=("acme/chat",),
        stand_ins=("acme/train",),
    )
    print_banner(Console(file=out, width=300, no_color=True), banner)
    lines = out.getvalue().splitlines()
    assert lines[1] == "  for real     acme/chat: their own commands, on simulated GPUs"
    assert lines[2].startswith("  stand-ins    acme/train: simulated model servers and workloads")
    assert "--real-commands" in lines[2]
    on_real_gpus = UpBanner(
        how="real GPUs", server_url="", gateway_url="", admin_token="", viewer_tenant=None,
        viewer_token=None, keys=[],
    )  # fmt: skip
    out = io.StringIO()
    print_banner(Console(file=out, width=300, no_color=True), on_real_gpus)
    assert "stand-ins" not in out.getvalue()
    assert "for real" not in out.getvalue()
