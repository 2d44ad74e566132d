"""What `gpuplex up` prints once everything answers: where to look, what to paste.

Every line to paste works as printed in a new shell: the CLI line exports what the other commands
need (the instance's home for `keys`, `token`, `audit` and `host`; the control plane's address and
the admin token for `job` and `statement`), and the job line names the `gpuplex` that runs here
(its full path when the shell's `gpuplex` is another one, or none).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from gpuplex.core.catalog import GpuModel
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.fleet import runs_mig
from gpuplex.core.spec.tenants import Isolation
from gpuplex.settings import HOME_VARIABLE, SERVER_URL_VARIABLE, TOKEN_VARIABLE

#: What the example job runs (a stand-in holds its GPU on simulated GPUs).
EXAMPLE_JOB_COMMAND = "sleep 300"


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
    #: how a shell runs this gpuplex (`gpuplex`, or its full path)
    cli: str = "gpuplex"
    #: `job submit`'s arguments for a small job of a tenant with a queue; None: no queues
    job_example: tuple[str, ...] | None = None
    #: on simulated GPUs: the workloads (`tenant/workload`) that run their own commands ...
    real_commands: tuple[str, ...] = ()
    #: ... and those that run a stand-in (a simulated model server or workload)
    stand_ins: tuple[str, ...] = ()


def gpuplex_command() -> str:
    """How a shell runs the gpuplex that runs now: `gpuplex` when that is the one on PATH, else
    the script beside this interpreter (a virtualenv's, as `make demo` runs it), else
    `python -m gpuplex.cli` with this interpreter."""
    beside = Path(sys.executable).parent / "gpuplex"
    found = shutil.which("gpuplex")
    if beside.is_file():
        if found is not None and Path(found).resolve() == beside.resolve():
            return "gpuplex"
        return shlex.quote(str(beside.absolute()))
    return f"{shlex.quote(sys.executable)} -m gpuplex.cli"


def job_example(spec: GpuplexSpec, prefer: str | None) -> tuple[str, ...] | None:
    """`job submit` arguments for a small job: of `prefer` (the viewer's tenant) when it has a
    queue, else of the first tenant in `queues:`; asking in the form its isolation takes (a whole
    GPU, the fleet's smallest MIG slice, or 10 GiB of a shared GPU). None without queues."""
    queued = [
        leaf.name
        for org in spec.queues.organisations
        for team in org.teams
        for leaf in team.tenants
    ]
    if not queued:
        return None
    name = prefer if prefer in queued else queued[0]
    tenant = next(t for t in spec.tenants if t.name == name)
    gpu: tuple[str, ...] = ("--gpu-memory-gib", "10")
    if tenant.isolation in (Isolation.DEDICATED, Isolation.AUTO):
        gpu = ("--gpu-count", "1")
    elif tenant.isolation is Isolation.MIG:
        profile = _smallest_mig_profile(spec)
        if profile is not None:
            gpu = ("--mig-profile", profile)
    return ("job", "submit", "--tenant", name, *gpu, "--command", EXAMPLE_JOB_COMMAND)


def _smallest_mig_profile(spec: GpuplexSpec) -> str | None:
    models: list[GpuModel] = []
    for node in spec.fleet.nodes:
        for group in node.gpus:
            model = spec.fleet.catalog.model(group.model)
            if model is not None and model.mig is not None and runs_mig(model, group.mig):
                models.append(model)
    profiles = [p for m in models if m.mig is not None for p in m.mig.profiles]
    if not profiles:
        return None
    return min(profiles, key=lambda p: (p.memory_mib, p.compute_slices, p.name)).name


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


def _what_runs(banner: UpBanner) -> list[str]:
    """On simulated GPUs, which workloads run their own commands and which a stand-in."""
    lines = []
    if banner.real_commands:
        lines.append(
            f"  for real     {escape(', '.join(banner.real_commands))}: "
            "their own commands, on simulated GPUs"
        )
    if banner.stand_ins:
        lines.append(
            f"  stand-ins    {escape(', '.join(banner.stand_ins))}: simulated model servers and "
            "workloads, not their commands (--real-commands or --real TENANT/WORKLOAD runs them)"
        )
    return lines


def print_banner(console: Console, banner: UpBanner) -> None:
    """Plain lines, never cut: tokens and keys must survive a copy and paste from any terminal."""
    lines = [
        f"[bold green]gpuplex is up[/]: {escape(banner.how)}",
        *_what_runs(banner),
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
        exported = (
            f"{HOME_VARIABLE}={shlex.quote(str(banner.home))} "
            f"{SERVER_URL_VARIABLE}={shlex.quote(banner.server_url)} "
            f"{TOKEN_VARIABLE}={shlex.quote(banner.admin_token)}"
        )
        lines.append(
            f"  CLI          export {escape(exported)}  "
            "(for gpuplex keys, token, audit, host, job, statement)"
        )
    if banner.job_example is not None:
        lines.append(
            f"  try a job    {escape(banner.cli)} {escape(shlex.join(banner.job_example))}  "
            "(after the export above)"
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
