"""Rich tables for plans: a placement table and a per-GPU map of slices and tenants."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import GpuView, Plan

_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def _colour(tenant: str, tenants: list[str]) -> str:
    return _COLOURS[tenants.index(tenant) % len(_COLOURS)]


def placement_table(plan: Plan) -> Table:
    table = Table(title="Placements", title_justify="left")
    for column in ("replica", "mode", "node", "GPU", "slice / share", "GiB", "why"):
        table.add_column(column, overflow="fold")
    for p in plan.placements:
        if p.mig is not None:
            share = f"{p.mig.profile} @ slot {p.mig.start_slot}"
        elif p.thread_percent is not None:
            share = f"{p.thread_percent}% threads"
        else:
            share = "whole GPU" if p.mode == "dedicated" else "time-sliced"
        gpus = ",".join(str(i) for i in p.gpu_indices)
        table.add_row(
            f"{p.tenant}/{p.workload}#{p.replica}",
            p.mode,
            p.node,
            gpus,
            share,
            f"{p.memory_mib / 1024:.1f}",
            p.reason,
        )
    return table


def gpu_map(plan: Plan) -> Table:
    tenants = sorted({o.tenant for gpu in plan.gpus for o in gpu.occupants})
    table = Table(title="GPU map", title_justify="left")
    for column in ("node", "GPU", "model", "mode", "slices and shares"):
        table.add_column(column)
    for gpu in plan.gpus:
        table.add_row(gpu.node, str(gpu.index), gpu.model, gpu.mode or "idle", _cells(gpu, tenants))
    return table


def _cells(gpu: GpuView, tenants: list[str]) -> Text:
    text = Text()
    if gpu.mode == "mig":
        model = gpu_model(gpu.model)
        slots = model.mig.memory_slices if model and model.mig else 8
        owner: list[tuple[str, str] | None] = [None] * slots
        for o in gpu.occupants:
            if o.mig is not None:
                for s in range(o.mig.start_slot, o.mig.start_slot + o.mig.size_slots):
                    owner[s] = (o.tenant, f"{o.workload}#{o.replica} {o.mig.profile}")
        s = 0
        while s < slots:
            cell = owner[s]
            width = 1
            while s + width < slots and owner[s + width] == cell:
                width += 1
            label = f"{cell[0]}/{cell[1]}" if cell else "free"
            style = _colour(cell[0], tenants) if cell else "dim"
            text.append(f"[{label:^{max(width * 6 - 2, len(label))}}]", style=style)
            s += width
        return text
    for n, o in enumerate(gpu.occupants):
        if n:
            text.append(" ")
        share = f"{o.memory_mib / 1024:.0f}G"
        if o.thread_percent is not None:
            share += f"/{o.thread_percent}%"
        label = f"{o.tenant}/{o.workload}#{o.replica}"
        text.append(
            f"[{label} {share}]" if gpu.mode != "dedicated" else label,
            style=_colour(o.tenant, tenants),
        )
    if not gpu.occupants:
        text.append("free", style="dim")
    return text


def summary_line(plan: Plan) -> str:
    s = plan.summary
    line = (
        f"{s.replicas_placed} replicas placed on {s.gpus_used} of {s.gpus_total} GPUs "
        f"({plan.policy})"
    )
    if s.replicas_infeasible:
        line += f", {s.replicas_infeasible} not placed"
    if s.preemptions:
        line += f", {s.preemptions} preempted"
    if s.moves:
        line += f", {s.moves} moved"
    return line


def problems_table(plan: Plan) -> Table | None:
    if not plan.infeasible and not plan.preemptions:
        return None
    table = Table(title="Not placed", title_justify="left")
    table.add_column("replica")
    table.add_column("why", overflow="fold")
    for item in plan.infeasible:
        table.add_row(item.label(), "\n".join(item.reasons))
    for preempted in plan.preemptions:
        table.add_row(preempted.label(), preempted.reason)
    return table
