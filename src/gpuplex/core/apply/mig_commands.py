"""`--dry-run`: the nvidia-smi commands equivalent to the MIG actions, for an operator to read or run."""

from __future__ import annotations

from gpuplex.core.apply.actions import CreateMigInstance, DestroyMigInstance, HostAction


def nvidia_smi_commands(actions: list[HostAction]) -> list[str]:
    lines: list[str] = []
    for action in actions:
        if isinstance(action, DestroyMigInstance):
            gpu, gi = action.gpu_index, action.gi_id
            lines.append(f"nvidia-smi mig -i {gpu} -gi {gi} -dci")
            lines.append(f"nvidia-smi mig -i {gpu} -gi {gi} -dgi")
        elif isinstance(action, CreateMigInstance):
            mig = action.slice
            # profile ID, then the placement's start slot: the exact slot the plan chose.
            lines.append(
                f"nvidia-smi mig -i {action.gpu_index} -cgi {mig.profile_id}:{mig.start_slot} -C"
            )
    return lines


def mig_mode_commands(gpu_index: int, enable: bool) -> list[str]:
    return [f"nvidia-smi -i {gpu_index} -mig {1 if enable else 0}"]
