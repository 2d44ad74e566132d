"""Tables of the GPU catalog: the models a spec may name, and each model's MIG profiles."""

from __future__ import annotations

from rich.table import Table

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, GpuModel, Provenance


def models_table(models: tuple[GpuModel, ...]) -> Table:
    table = Table(
        title="GPU models (gpuplex catalog MODEL lists its MIG profiles)", title_justify="left"
    )
    for column in ("model", "memory GiB", "SMs", "MIG", "facts from"):
        table.add_column(column)
    for model in models:
        mig = f"{len(model.mig.profiles)} profiles" if model.mig else "no"
        table.add_row(
            model.name, f"{model.memory_gib:.1f}", str(model.sm_count), mig, model.provenance
        )
    table.caption = f"MPS: at most {MPS_CLIENT_LIMIT} clients per GPU are planned."
    if any(model.provenance is Provenance.SPEC for model in models):
        table.caption += " Facts from spec: added by the spec's fleet.gpu_models."
    return table


def profiles_table(model: GpuModel) -> Table:
    table = Table(title=f"MIG profiles of {model.name}", title_justify="left")
    for column in (
        "profile",
        "id",
        "compute slices",
        "memory slices",
        "GiB",
        "max",
        "starts",
        "facts from",
    ):
        table.add_column(column)
    geometry = model.mig
    if geometry is None:
        table.caption = f"{model.name} has no MIG: dedicated, MPS or time-slicing only."
        return table
    for p in geometry.profiles:
        table.add_row(
            p.name,
            str(p.profile_id),
            f"{p.compute_slices}/{geometry.compute_slices}",
            f"{p.memory_slices}/{geometry.memory_slices}",
            f"{p.memory_mib / 1024:.2f}",
            str(p.max_count),
            ",".join(str(s) for s in p.starts),
            p.provenance,
        )
    return table
