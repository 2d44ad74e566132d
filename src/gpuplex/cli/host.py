"""`gpuplex host ...`: run a plan on this GPU server."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuplex.cli.help_pages import command_group
from gpuplex.consoles import stdout_console
from gpuplex.errors import NotFoundError
from gpuplex.settings import HostSettings, gpuplex_home

if TYPE_CHECKING:
    from gpuplex.core.spec import GpuplexSpec
    from gpuplex.host import session

host_app = command_group(
    "Run a plan on this GPU server: MIG, MPS, cgroups, supervised tenant processes."
)
out = stdout_console()


class Driver(StrEnum):
    AUTO = "auto"
    NVML = "nvml"
    SIM = "sim"


class StatusFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where the host runtime keeps this host's state.",
        show_default="$GPUPLEX_HOME/host",
    ),
]
NodeOption = Annotated[
    str | None, typer.Option(help="This server's node name in the fleet (needed with several).")
]
DriverOption = Annotated[
    Driver, typer.Option(help="nvml: real GPUs; sim: simulated GPUs; auto: NVML if it loads.")
]
RealOption = Annotated[
    list[str] | None,
    typer.Option(
        "--real",
        metavar="TENANT/WORKLOAD",
        help="With --stand-ins: this workload runs its own command (a real model server on "
        "simulated GPUs), not a stand-in. Repeat for several.",
        show_default=False,
    ),
]


def _transform(
    stand_ins: bool, real: list[str] | None, spec: GpuplexSpec | None
) -> session.SpecTransform | None:
    """The stand-ins of `--stand-ins`, but for the `--real` workloads (checked against `spec`
    where there is one)."""
    from gpuplex.up.simulate import stand_ins_but, unknown_real

    if not stand_ins:
        if real:
            raise typer.BadParameter("--real goes with --stand-ins", param_hint="--real")
        return None
    if spec is not None:
        problems = unknown_real(spec, real or [])
        if problems:
            raise typer.BadParameter("; ".join(problems), param_hint="--real")
    return stand_ins_but(real or [])


def _settings(
    state_dir: Path | None,
    node: str | None = None,
    driver: Driver = Driver.AUTO,
    interval_s: float = 1.0,
) -> HostSettings:
    return HostSettings(
        state_dir=(state_dir or gpuplex_home().host_dir).absolute(),
        node=node,
        driver=driver.value,
        interval_s=interval_s,
    )


@host_app.command("apply")
def apply_command(
    file: Annotated[Path, typer.Argument(help="The gpuplex.yaml to apply.", show_default=False)],
    state_dir: StateDirOption = None,
    node: NodeOption = None,
    driver: DriverOption = Driver.AUTO,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Print what would change, and the nvidia-smi commands."),
    ] = False,
    stand_ins: Annotated[
        bool,
        typer.Option(
            "--stand-ins",
            help="Run gpuplex's stand-ins (simulated model servers and workloads, as `gpuplex up` "
            "does without a GPU) instead of the spec's commands: to try the host runtime.",
        ),
    ] = False,
    real: RealOption = None,
) -> None:
    """Plan the spec against what this host runs and make it so (one reconcile pass)."""
    from gpuplex.cli.spec_warnings import warn_root_tenants
    from gpuplex.core.apply.actions import describe
    from gpuplex.core.apply.mig_commands import nvidia_smi_commands
    from gpuplex.core.plural import counted
    from gpuplex.host import session
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(file)
    settings = _settings(state_dir, node, driver)
    warn_root_tenants(spec)
    transform = _transform(stand_ins, real, spec)
    result = session.apply(
        spec, file.read_bytes(), file, settings, dry_run=dry_run, transform=transform
    )
    if result.note:
        out.print(f"[yellow]note[/]: {escape(result.note)}")
    for line in result.desired.notes:
        out.print(f"[yellow]skipped[/]: {escape(line)}")
    for unplaced in result.plan.infeasible:
        reasons = "; ".join(unplaced.reasons)
        out.print(f"[yellow]not placed[/]: {escape(unplaced.label())}: {escape(reasons)}")
    if dry_run:
        for problem in result.problems:
            out.print(f"[red]would not start[/]: {escape(problem)}")
        if not result.actions:
            out.print("nothing to change")
        for action in result.actions:
            out.print(f"would {escape(describe(action))}", highlight=False)
        commands = nvidia_smi_commands(result.actions)
        if commands:
            out.print("\nequivalent nvidia-smi commands:")
            for command in commands:
                out.print(f"  {command}", highlight=False)
        return
    if result.supervisor_pid is not None:
        out.print(f"written; the running supervisor (pid {result.supervisor_pid}) applies it now")
        return
    for event in result.events:
        out.print(
            f"{event.kind:>18}  {escape(event.target)}: {escape(event.message)}", highlight=False
        )
    running = len(result.desired.workloads)
    out.print(
        f"[green]applied[/]: {counted(running, 'replica')} on node {result.desired.node}; "
        "run `gpuplex host run` to keep supervising them"
    )


@host_app.command("run")
def run_command(
    file: Annotated[
        Path | None, typer.Argument(help="Apply this spec first (else the last one applied).")
    ] = None,
    state_dir: StateDirOption = None,
    node: NodeOption = None,
    driver: DriverOption = Driver.AUTO,
    interval: Annotated[
        float, typer.Option(help="Seconds between reconcile passes.", min=0.05)
    ] = 1.0,
    follow_store: Annotated[
        str | None,
        typer.Option(
            help="Run the control plane's applied revision from this store (a SQLAlchemy URL), "
            "and each newer one as it is applied: its placements as planned, never re-planned.",
            show_default=False,
        ),
    ] = None,
    stand_ins: Annotated[
        bool,
        typer.Option(
            "--stand-ins",
            help="Run gpuplex's stand-ins (simulated model servers and workloads) instead of the "
            "spec's commands, as `gpuplex up` does without a GPU.",
        ),
    ] = False,
    real: RealOption = None,
) -> None:
    """Supervise this host: restart crashed replicas, health checks, VRAM watchdog, MPS daemons.

    Stopping it (or a crash) leaves every tenant running; starting it again re-adopts them."""
    from gpuplex.host import session
    from gpuplex.host.state import StateDir
    from gpuplex.specfile import load_spec_file
    from gpuplex.up.lifecycle import exit_with_parent

    exit_with_parent()  # under `gpuplex up`: stop when up dies, even by kill -9
    settings = _settings(state_dir, node, driver, interval)
    if file is not None and follow_store is not None:
        raise typer.BadParameter("give a spec file or --follow-store, not both", param_hint="FILE")
    spec = load_spec_file(file) if file is not None else None
    transform = _transform(stand_ins, real, spec)
    if file is not None and spec is not None:
        session.store(spec, file.read_bytes(), file, settings, transform)
    out.print(
        f"supervising {settings.state_dir} every {interval:g} s (Ctrl-C leaves tenants running)"
    )
    if follow_store is None:
        session.run(settings)
        return
    from gpuplex.host.follow import HEARTBEAT_S, RevisionFollower  # SQLAlchemy only for this
    from gpuplex.host.identity_publisher import IdentityPublisher
    from gpuplex.host.output_reports import OutputReporter
    from gpuplex.revision import AppliedRevisions
    from gpuplex.store.db import open_store
    from gpuplex.store.host_events import HostEvents
    from gpuplex.store.job_logs import JobLogs
    from gpuplex.store.job_reports import JobReports
    from gpuplex.store.jobs import JobRepository
    from gpuplex.store.replica_identities import ReplicaIdentities
    from gpuplex.store.spec_revisions import SpecRevisions

    engine = open_store(follow_store)
    try:
        revisions = AppliedRevisions(SpecRevisions(engine))
        jobs, reports = JobRepository(engine), JobReports(engine)
        dirs = StateDir(settings.state_dir)
        # the jobs' output and the events go to the store: the control plane reads them there
        output = OutputReporter(dirs, JobLogs(engine), HostEvents(engine), HEARTBEAT_S)
        follower = RevisionFollower(revisions, settings, transform, jobs, reports, output)
        # the gateway learns who each replica runs as, and talks to nothing else on its port
        publisher = IdentityPublisher(follower, ReplicaIdentities(engine), dirs)
        session.run(settings, follower=publisher)
    finally:
        engine.dispose()


@host_app.command("status")
def status_command(
    state_dir: StateDirOption = None,
    output: Annotated[StatusFormat, typer.Option("--output", "-o")] = StatusFormat.TABLE,
) -> None:
    """GPUs, MIG slices, replicas, processes, memory and restarts on this host."""
    from gpuplex.cli.host_view import events_table, gpus_table, mps_table, replicas_table
    from gpuplex.host.state import StateDir
    from gpuplex.host.status import host_status
    from gpuplex.host.wiring import open_driver

    settings = _settings(state_dir)
    dirs = StateDir(settings.state_dir)
    opened = open_driver(settings, dirs, None)
    try:
        report = host_status(dirs, opened.driver)
    finally:
        opened.driver.close()
    if output is StatusFormat.JSON:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        return
    supervisor = (
        f"supervisor pid {report.supervisor_pid}"
        if report.supervisor_pid
        else "no supervisor running"
    )
    out.print(
        f"node {report.node or '?'} ({report.driver} driver), {supervisor}, instance "
        f"{report.instance} (cgroups gpuplex/{report.instance}, state {dirs.root})"
    )
    out.print(gpus_table(report))
    out.print(replicas_table(report))
    if report.mps_daemons:
        out.print(mps_table(report))
    if report.recent_events:
        out.print(events_table(report))


@host_app.command("down")
def down_command(
    state_dir: StateDirOption = None,
    forget_users: Annotated[
        bool,
        typer.Option(
            "--forget-users",
            help="Also delete the tenant users gpuplex made for this instance (their folders "
            "stay, handed to root): for an instance that is gone for good.",
        ),
    ] = False,
) -> None:
    """Stop everything this state directory's instance runs, and forget the applied spec.

    Stops every replica and MPS daemon, and anything left in the replicas' cgroups. Exits 1
    naming any process it could not stop."""
    from gpuplex.host import session

    result = session.down(_settings(state_dir), forget_users=forget_users)
    if result.users_removed:
        out.print(f"removed users: {', '.join(result.users_removed)}", highlight=False)
    for event in result.events:
        out.print(
            f"{event.kind:>18}  {escape(event.target)}: {escape(event.message)}", highlight=False
        )
    if result.left:
        for line in result.left:
            out.print(f"[red]still running[/]  {escape(line)}", highlight=False)
        out.print("[red]down[/]: the processes above could not be stopped; see `ps -p <pid>`")
        raise typer.Exit(1)
    out.print("[green]down[/]: nothing of this gpuplex instance runs on this host")


@host_app.command("mig-mode")
def mig_mode_command(
    gpu: Annotated[int, typer.Argument(help="GPU index.", min=0)],
    mode: Annotated[str, typer.Argument(help="on or off", show_default=False)],
    state_dir: StateDirOption = None,
    driver: DriverOption = Driver.AUTO,
    yes: Annotated[bool, typer.Option("--yes", help="Do it (without it: only print).")] = False,
) -> None:
    """Switch a GPU's MIG mode: an explicit operator action, never done by apply. Prints first."""
    from gpuplex.core.apply.mig_commands import mig_mode_commands
    from gpuplex.host import session

    if mode not in ("on", "off"):
        raise typer.BadParameter("say on or off", param_hint="MODE")
    settings = _settings(state_dir, driver=driver)
    enable = mode == "on"
    busy = session.mig_mode_preview(settings, gpu)
    out.print(f"this turns MIG mode {mode} on GPU {gpu}, like:")
    for command in mig_mode_commands(gpu, enable):
        out.print(f"  {command}", highlight=False)
    out.print("the driver may reset the GPU to do it; every process on it must stop first")
    if busy:
        out.print(f"[red]running on it now[/]: {', '.join(busy)}")
    if not yes:
        out.print("nothing done: run again with --yes")
        raise typer.Exit(1)
    session.set_mig_mode(settings, gpu, enable)
    out.print(f"[green]done[/]: MIG mode {mode} on GPU {gpu}")


@host_app.command("check-catalog")
def check_catalog_command(
    state_dir: StateDirOption = None,
    driver: DriverOption = Driver.AUTO,
    gpu: Annotated[int | None, typer.Option(help="Only this GPU index.", min=0)] = None,
) -> None:
    """Compare the catalog's MIG profiles, placements and memory with what NVML reports.

    Read-only: MIG mode is not touched. Exit status 1 where they disagree for any GPU."""
    from gpuplex.cli.host_view import disagreements_table
    from gpuplex.core.catalog import gpu_model
    from gpuplex.core.catalog.device_check import catalog_verdict
    from gpuplex.host.state import StateDir
    from gpuplex.host.wiring import open_driver

    settings = _settings(state_dir, driver=driver)
    opened = open_driver(settings, StateDir(settings.state_dir), None)
    try:
        checked = [
            (status, opened.driver.mig_profiles(status.index))
            for status in opened.driver.gpus()
            if gpu is None or status.index == gpu
        ]
    finally:
        opened.driver.close()
    if not checked:
        raise NotFoundError(f"no GPU {gpu} on this host" if gpu is not None else "no GPU found")
    disagree = False
    for status, profiles in checked:
        model = gpu_model(status.model)
        verdict = catalog_verdict(
            status.model, model, status.memory_mib, status.mig_enabled, profiles
        )
        out.print(f"GPU {status.index} ({escape(status.model)}): {escape(verdict.summary)}")
        if verdict.disagreements:
            disagree = True
            out.print(disagreements_table(verdict.disagreements))
    if disagree:
        raise typer.Exit(1)
