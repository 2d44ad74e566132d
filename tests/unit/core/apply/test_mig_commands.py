"""The nvidia-smi commands `--dry-run` prints for MIG actions."""

from __future__ import annotations

from gpuplex.core.apply.actions import (
    Blocked,
    CreateMigInstance,
    DestroyMigInstance,
    HostAction,
    StartWorkload,
)
from gpuplex.core.apply.mig_commands import mig_mode_commands, nvidia_smi_commands
from gpuplex.core.plan.model import Mode
from tests.unit.core.apply.factories import binding, mig_slice, wanted


def test_create_names_profile_id_and_start_slot() -> None:
    actions: list[HostAction] = [
        CreateMigInstance(gpu_index=3, slice=mig_slice("3g.40gb", 4)),
        CreateMigInstance(gpu_index=0, slice=mig_slice("1g.10gb", 6)),
    ]
    assert nvidia_smi_commands(actions) == [
        "nvidia-smi mig -i 3 -cgi 9:4 -C",
        "nvidia-smi mig -i 0 -cgi 19:6 -C",
    ]


def test_destroy_removes_compute_instances_then_the_gpu_instance() -> None:
    destroy = DestroyMigInstance(
        gpu_index=2, gi_id=7, profile="2g.20gb", start_slot=4, reason="not in the plan"
    )
    assert nvidia_smi_commands([destroy]) == [
        "nvidia-smi mig -i 2 -gi 7 -dci",
        "nvidia-smi mig -i 2 -gi 7 -dgi",
    ]


def test_other_actions_have_no_command_and_order_is_kept() -> None:
    actions: list[HostAction] = [
        Blocked(target="GPU 1", reason="lost"),
        DestroyMigInstance(gpu_index=1, gi_id=2, profile="1g.10gb", start_slot=0, reason="x"),
        StartWorkload(desired=wanted("w", binding(Mode.DEDICATED, 0)), reason="planned here"),
        CreateMigInstance(gpu_index=1, slice=mig_slice("2g.20gb", 0)),
    ]
    assert nvidia_smi_commands(actions) == [
        "nvidia-smi mig -i 1 -gi 2 -dci",
        "nvidia-smi mig -i 1 -gi 2 -dgi",
        "nvidia-smi mig -i 1 -cgi 14:0 -C",
    ]
    assert nvidia_smi_commands([]) == []


def test_mig_mode_commands() -> None:
    assert mig_mode_commands(4, True) == ["nvidia-smi -i 4 -mig 1"]
    assert mig_mode_commands(0, False) == ["nvidia-smi -i 0 -mig 0"]
