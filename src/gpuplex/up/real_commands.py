"""What `gpuplex up` runs for real on simulated GPUs, and what it refuses before applying a spec.

Without a GPU, `up` runs a stand-in for each command (up/simulate.py) unless told otherwise:
`--real-commands` runs every workload's own command, `--real TENANT/WORKLOAD` those named, e.g.
a real vLLM on CPU as a tenant's model server. Either way the host runtime would refuse what it
cannot start (a folder granted in `reads` that the tenant's user cannot read, a command that user
cannot run) only once the spec is applied, as an event nobody at the terminal sees: `up` says it
first, and applies nothing."""

from __future__ import annotations

from dataclasses import replace

from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import GpuDriverError, HostActionError
from gpuplex.host import session
from gpuplex.server.context import ServerContext
from gpuplex.settings import HostSettings, UpSettings
from gpuplex.up.simulate import stand_ins_but


def simulated_driver(driver: str) -> bool:
    """Whether `driver` (auto, nvml, sim) runs on simulated GPUs here: auto does when NVML finds
    no GPU."""
    if driver != "auto":
        return driver == "sim"
    try:
        from gpuplex.host.nvml_driver import NvmlDriver

        NvmlDriver().close()
    except GpuDriverError:
        return True
    return False


def real_workloads(settings: UpSettings) -> tuple[str, ...] | None:
    """On simulated GPUs, the workloads that run their own commands; None: all of them."""
    return None if settings.real_commands else settings.real


def refuse_what_cannot_start(
    ctx: ServerContext,
    spec: GpuplexSpec,
    settings: UpSettings,
    host_settings: HostSettings,
    real: tuple[str, ...] | None,
) -> None:
    """Plan the spec as its apply will (against the applied revision's plan) and refuse, before
    anything is applied, what the host runtime would refuse to start: a folder granted in
    `reads` that a tenant's user cannot read (at its line in the spec file), a command the
    tenant's user cannot run. Stand-ins read no granted folder."""
    applied = ctx.current.get()
    plan = make_plan(spec, current=applied.plan if applied is not None else None)
    transform = None if real is None else stand_ins_but(real)
    if not spec.fleet.nodes:
        return  # discovered at apply; the host runtime says what it cannot start
    here = replace(host_settings, node=spec.fleet.nodes[0].name)  # the node `up` runs
    _, problems, unreadable = session.desired_file(
        spec, plan, 0, "", str(settings.spec_path), here, transform
    )
    if unreadable:
        raise session.unreadable_error(
            spec, settings.spec_path.read_bytes(), settings.spec_path, unreadable
        )
    if problems:
        raise HostActionError(f"{settings.spec_path}: nothing was started: " + "; ".join(problems))
