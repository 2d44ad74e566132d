"""The warnings `validate`, `plan` and `host apply` print about a spec that is valid but likely
wrong: tenants that run as root, queues' guarantees past the fleet, ports two replicas would share.
On stderr, so that `plan -o json` stays JSON."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from gpuplex.consoles import stderr_console
from gpuplex.core.apply.desired import fleet_port_clashes
from gpuplex.core.apply.users import root_warnings
from gpuplex.core.plan import Plan, Target
from gpuplex.core.plan.node_sharing import target_of
from gpuplex.core.queues.fleet_warnings import guarantee_warnings
from gpuplex.core.spec import GpuplexSpec
from gpuplex.specfile import locate_in_file

err = stderr_console()


def warn_root_tenants(spec: GpuplexSpec) -> None:
    """Every tenant that opts in to running as root, on stderr (so `plan -o json` stays JSON)."""
    for warning in root_warnings(spec):
        err.print(f"[yellow]warning[/]: {escape(warning)}", highlight=False, soft_wrap=True)


def warn_spec_file(spec: GpuplexSpec, path: Path) -> None:
    """What is valid in the spec at `path` but likely a mistake (queues' guarantees past the
    fleet), on stderr as errors are given: file:line:column, the field path, what to do."""
    for warning in locate_in_file(path, guarantee_warnings(spec)):
        where = f"{path}:{warning.line}:{warning.column}"
        err.print(
            f"[yellow]warning[/]: {escape(where)}: {escape(warning.dotted_path)}: "
            f"{escape(warning.message)}",
            highlight=False,
            soft_wrap=True,
        )


def warn_port_clashes(spec: GpuplexSpec, plan: Plan, path: object) -> None:
    """Ports two replicas would share on one node (the host runtime only): `host apply` on that
    node would refuse the spec, so say it now, on stderr."""
    if target_of(spec) is not Target.HOST:
        return  # on Kubernetes each pod has its own network
    for clash in fleet_port_clashes(spec, plan):
        err.print(
            f"[yellow]warning[/]: {path}: {escape(clash)} (`host apply` there would refuse it)",
            highlight=False,
            soft_wrap=True,
        )
