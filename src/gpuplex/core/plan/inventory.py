"""The fleet's GPUs as a flat, ordered list: what the planner places onto."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.catalog import GpuModel
from gpuplex.core.spec import FleetSpec, MigModeSpec, PlacementPolicy, runs_mig, runs_whole
from gpuplex.core.spec.pools import gpu_pool


@dataclass(frozen=True, slots=True)
class GpuSlot:
    gpu_id: int  # position in node order: node 0's GPUs first
    node: str
    index: int  # GPU index on its node
    model: GpuModel
    uuid: str | None
    pool: str | None
    mig_policy: MigModeSpec
    order: tuple[int, int]  # preference among empty GPUs, by placement policy
    # what the MIG policy lets the GPU run (`runs_mig`, `runs_whole` of the spec), found once: the
    # planner asks them for every GPU it considers
    runs_mig: bool
    runs_whole: bool

    @property
    def group(self) -> tuple[str, str | None]:
        """GPUs of one group (model and pool) differ only in their MIG policy and what is on them."""
        return (self.model.name, self.pool)


def build_inventory(fleet: FleetSpec, policy: PlacementPolicy) -> list[GpuSlot]:
    """Binpack fills node by node; spread takes GPU 0 of every node, then GPU 1, and so on."""
    slots: list[GpuSlot] = []
    catalog = fleet.catalog
    for node_order, node in enumerate(fleet.nodes):
        index = 0
        for group in node.gpus:
            model = catalog.model(group.model)
            if model is None:  # validation reports it; planning skips the group
                continue
            for k in range(group.count):
                order = (
                    (node_order, index)
                    if policy is PlacementPolicy.BINPACK
                    else (index, node_order)
                )
                slots.append(
                    GpuSlot(
                        gpu_id=len(slots),
                        node=node.name,
                        index=index,
                        model=model,
                        uuid=group.uuids[k] if group.uuids else None,
                        pool=gpu_pool(node, group),
                        mig_policy=group.mig,
                        order=order,
                        runs_mig=runs_mig(model, group.mig),
                        runs_whole=runs_whole(model, group.mig),
                    )
                )
                index += 1
    return slots
