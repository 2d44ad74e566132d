"""Rich tables for `gpuplex host status`."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from gpuplex.core.catalog.device_check import Disagreement
from gpuplex.host.status import HostStatus


def gpus_table(report: HostStatus) -> Table:
    table = Table(title="GPUs")
    for column in ("GPU", "model", "UUID", "MIG", "slices", "state"):
        table.add_column(column)
    for gpu in report.gpus:
        slices = ", ".join(f"{i.profile}@{i.start_slot}" for i in gpu.instances) or "-"
        table.add_row(
            str(gpu.index),
            gpu.model,
            gpu.uuid,
            "on" if gpu.mig_enabled else "off",
            slices,
            "[red]lost[/]" if gpu.lost else "ok",
        )
    return table


def replicas_table(report: HostStatus) -> Table:
    table = Table(title="Replicas")
    for column in (
        "replica",
        "phase",
        "pid",
        "GPU",
        "memory MiB (used/planned)",
        "restarts",
    ):
        table.add_column(column)
    table.add_column("note", overflow="fold")  # a log path must be read whole, even folded
    for replica in report.replicas:
        phase = replica.phase.value
        if replica.pid is not None and not replica.alive:
            phase += " [red](pid gone)[/]"
        used = "-" if replica.observed_memory_mib is None else str(replica.observed_memory_mib)
        note = escape(replica.message or replica.last_exit or "")
        if not replica.alive and replica.stderr_last_line:  # where to look, and what it said
            said = f"[dim]{escape(replica.stderr_log)}:[/] {escape(replica.stderr_last_line)}"
            note = f"{note}\n{said}" if note else said
        table.add_row(
            replica.label,
            phase,
            str(replica.pid or "-"),
            replica.gpu,
            f"{used}/{replica.planned_memory_mib}",
            str(replica.restarts),
            note,
        )
    return table


def mps_table(report: HostStatus) -> Table:
    table = Table(title="MPS control daemons")
    for column in ("GPU", "pid", "alive", "restarts", "pipe directory"):
        table.add_column(column)
    for daemon in report.mps_daemons:
        table.add_row(
            str(daemon.gpu_index),
            str(daemon.pid),
            "yes" if daemon.alive else "[red]no[/]",
            str(daemon.restarts),
            daemon.pipe_dir,
        )
    return table


def events_table(report: HostStatus) -> Table:
    table = Table(title="Recent events")
    for column in ("at (UTC)", "event", "target", "message"):
        table.add_column(column)
    for event in report.recent_events:
        table.add_row(event.at.strftime("%H:%M:%S"), event.kind, event.target, event.message)
    return table


def disagreements_table(found: list[Disagreement]) -> Table:
    table = Table("profile", "fact", "catalog", "device")
    for item in found:
        table.add_row(escape(item.profile), item.field, escape(item.catalog), escape(item.device))
    return table
