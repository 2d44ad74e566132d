"""What `gpuplex up` prints once everything answers: where to look, what to paste."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape


@dataclass(frozen=True, slots=True)
class DemoKey:
    tenant: str
    models: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class UpBanner:
    how: str  # e.g. "8 simulated H100-80GB GPUs (no NVIDIA GPU found)"
    server_url: str
    gateway_url: str
    admin_token: str
    viewer_tenant: str | None
    viewer_token: str | None
    keys: list[DemoKey]
    #: the bearer token that reads the gateway's and the control plane's /metrics
    metrics_token: str | None = None
    #: this instance's state directory: the other gpuplex commands find it through GPUPLEX_HOME
    home: Path | None = None


def openai_example(gateway_url: str, key: DemoKey) -> str:
    return (
        "from openai import OpenAI\n\n"
        f'client = OpenAI(base_url="{gateway_url}/v1", api_key="{key.key}")\n'
        "reply = client.chat.completions.create(\n"
        f'    model="{key.models[0]}",\n'
        '    messages=[{"role": "user", "content": "Hello!"}],\n'
        ")\n"
        "print(reply.choices[0].message.content, reply.usage)\n"
    )


def print_banner(console: Console, banner: UpBanner) -> None:
    """Plain lines, never cut: tokens and keys must survive a copy and paste from any terminal."""
    lines = [
        f"[bold green]gpuplex is up[/]: {escape(banner.how)}",
        f"  dashboard    {banner.server_url}/dashboard/#token={banner.admin_token}",
    ]
    if banner.viewer_token is not None and banner.viewer_tenant is not None:
        lines.append(
            f"  as {escape(banner.viewer_tenant)} (viewer)  "
            f"{banner.server_url}/dashboard/#token={banner.viewer_token}"
        )
    lines += [
        f"  REST API     {banner.server_url}/api/v1 (docs: {banner.server_url}/api/v1/docs)",
        f"  admin token  {banner.admin_token}",
        f"  gateway      {banner.gateway_url}/v1 (OpenAI-compatible)",
    ]
    if banner.metrics_token is not None:
        lines.append(
            f"  metrics      {banner.gateway_url}/metrics and {banner.server_url}/metrics with "
            f"`Authorization: Bearer {banner.metrics_token}`"
        )
    if banner.home is not None:
        lines.append(
            f"  CLI          export GPUPLEX_HOME={escape(shlex.quote(str(banner.home)))}  "
            "(for gpuplex keys, token, audit, host)"
        )
    lines += [
        "",
        "[bold]demo API keys[/] (shown once; each calls as its tenant):",
    ]
    lines += [
        f"  {escape(key.tenant)}: {key.key}  ({escape(', '.join(key.models))})"
        for key in banner.keys
    ]
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    if banner.keys:
        console.print("\n[bold]try it[/] (pip install openai):", highlight=False)
        console.print(
            openai_example(banner.gateway_url, banner.keys[0]),
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    console.print("[dim]Ctrl-C stops everything, tenants included.[/]")
