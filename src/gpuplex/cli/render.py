"""Rich tables for plans: a placement table and a per-GPU map of slices and tenants."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import GpuView, MigSlicePlan, Mode, Placement, Plan
from gpuplex.core.plural import counted
from gpuplex.core.report.placement_cost import placement_cost
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.document import PricingSpec

_COLOURS = ["cyan", "magenta", "green", "yellow", "blue", "red", "bright_cyan", "bright_magenta"]


def _colour(tenant: str, tenants: list[str]) -> str:
    return _COLOURS[tenants.index(tenant) % len(_COLOURS)]


def placement_table(plan: Plan, pricing: PricingSpec) -> Table:
    """One row per replica; `GiB` says what a rounded-up request asked, `cost` is per hour (or
    the share of a GPU where the pricing has no price for the model)."""
    table = Table(title="Placements", title_justify="left")
    for column in ("replica", "mode", "node", "GPU", "slice / share", "GiB", "cost", "why"):
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
            _memory_cell(p),
            placement_cost(p, plan, pricing).short(),
            p.reason,
        )
    return table


def _memory_cell(placement: Placement) -> str:
    granted = f"{placement.memory_mib / 1024:.1f}"
    rounded = placement.rounded_up
    if rounded is None:
        return granted
    return f"{granted} (asked {rounded.requested_memory_mib / 1024:g})"


def changes_table(plan: Plan) -> Table | None:
    """What re-planning against `--current` changes: replicas that restart elsewhere and GPUs
    whose MIG layout is rebuilt. None when nothing changes."""
    if not plan.moves and not plan.mig_reconfigurations:
        return None
    table = Table(title="Changes against the current plan", title_justify="left")
    for column in ("change", "what", "from", "to"):
        table.add_column(column, overflow="fold")
    for move in plan.moves:
        table.add_row(
            "move",
            move.label(),
            _spot(move.from_node, move.from_gpu_indices, move.from_mode, move.from_mig),
            _spot(move.to_node, move.to_gpu_indices, move.to_mode, move.to_mig),
        )
    for change in plan.mig_reconfigurations:
        table.add_row(
            "MIG layout",
            f"{change.node} GPU {change.gpu_index}",
            ", ".join(change.before) or "no MIG instances",
            ", ".join(change.after) or "no MIG instances",
        )
    return table


def _spot(node: str, gpus: list[int], mode: Mode, mig: MigSlicePlan | None) -> str:
    where = f"{node} GPU {','.join(str(i) for i in gpus)}"
    return f"{where} {mig.profile}@{mig.start_slot}" if mig is not None else f"{where} {mode}"


def explanation_document(
    spec: GpuplexSpec, plan: Plan, tenant: str, workload: str, lines: list[str]
) -> dict[str, object]:
    """`explain -o json`: the sentences, and each placement of the workload with its cost."""
    placements = []
    for p in plan.placements:
        if (p.tenant, p.workload) == (tenant, workload):
            cost = placement_cost(p, plan, spec.pricing)
            price = None if cost.price_per_hour is None else str(cost.price_per_hour)
            placements.append(
                {
                    **p.model_dump(mode="json"),
                    "cost": {
                        "gpu_share": str(cost.gpu_share),
                        "price_per_hour": price,
                        "currency": cost.currency,
                        "text": cost.sentence(),
                    },
                }
            )
    return {"workload": f"{tenant}/{workload}", "explanation": lines, "placements": placements}


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
        f"{counted(s.replicas_placed, 'replica')} placed on {s.gpus_used} of "
        f"{counted(s.gpus_total, 'GPU')} "
        f"({plan.policy})"
    )
    if s.replicas_infeasible:
        line += f", {s.replicas_infeasible} not placed"
    if s.preemptions:
        line += f", {s.preemptions} preempted"
    if s.moves:
        line += f", {s.moves} moved"
    if plan.mig_reconfigurations:
        count = len(plan.mig_reconfigurations)
        line += f", {count} MIG layout{'s' if count > 1 else ''} changed"
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
