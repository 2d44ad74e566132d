"""What a replica still sees of the host's /tmp behind its private one (`kept_visible`), besides the
folders granted in the spec (`reads`, tests/unit/host/test_grants.py): a job keeps only gpuplex's
state directory, whatever its command, environment and program name; a workload of the spec keeps
its PYTHONPATH and its program's folder only where its user could reach them on the host (every
folder above by owner, group and mode), never one behind a folder it may not enter, and nothing
its arguments name: a folder it reads must be granted."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.core.plan.model import Mode
from gpuplex.host.launcher import TenantUser, kept_visible, reachable_as
from tests.unit.core.apply.factories import binding, wanted

NOBODY = TenantUser("nobody", 65534, 65534, Path("/nonexistent"))


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder anyone may enter (pytest's tmp_path is under a 700 folder), with `open/` (755,
    holding `bin/tool` and `model.bin`), `closed/` (700, holding `sub/secret` and `sub/tool`)
    and `state/` (711)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuplex-kept-"))
    folder.chmod(0o755)
    for made in ("open/bin", "closed/sub", "state"):
        (folder / made).mkdir(parents=True)
    (folder / "open").chmod(0o755)
    (folder / "open" / "bin").chmod(0o755)
    for file in ("open/bin/tool", "open/model.bin", "closed/sub/secret", "closed/sub/tool"):
        (folder / file).write_text("x")
    (folder / "closed").chmod(0o700)
    (folder / "state").chmod(0o711)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_job_keeps_only_the_state_directory(base: Path) -> None:
    job = wanted(
        "job-j1",
        binding(Mode.DEDICATED, 0),
        job=True,
        argv=[str(base / "open/bin/tool"), str(base / "open/model.bin"), str(base / "closed")],
    )
    env = {"PYTHONPATH": str(base / "open"), "PATH": "/usr/bin"}
    assert kept_visible(base / "state", env, job, NOBODY) == (str((base / "state").resolve()),)


def test_a_spec_workload_keeps_what_its_user_can_reach_and_nothing_behind_a_closed_folder(
    base: Path,
) -> None:
    served = wanted(
        "chat",
        binding(Mode.DEDICATED, 0),
        argv=[str(base / "open/bin/tool"), str(base / "closed/sub")],
    )
    env = {"PYTHONPATH": os.pathsep.join([str(base / "closed/sub"), str(base / "open")])}
    kept = kept_visible(base / "state", env, served, NOBODY)
    assert kept == (
        str((base / "state").resolve()),
        str(base / "open"),  # on PYTHONPATH
        str(base / "open/bin"),  # the program's folder
    )


def test_nothing_is_kept_for_naming_it_in_an_argument(base: Path) -> None:
    """`--lora-modules b/chat=/tmp/.../adapter` once hid the adapter (only arguments starting
    with / were guessed at), and a plain path let a replica see a folder nobody granted it."""
    (base / "adapters").mkdir(mode=0o755)
    served = wanted(
        "chat",
        binding(Mode.DEDICATED, 0),
        argv=[
            "/usr/bin/env",
            str(base / "open/model.bin"),
            f"--lora-modules=b/chat={base / 'adapters'}",
            str(base / "adapters"),
        ],
    )
    assert kept_visible(base / "state", {}, served, NOBODY) == (
        str((base / "state").resolve()),
        "/usr/bin",
    )


def test_a_program_behind_a_closed_folder_is_not_kept(base: Path) -> None:
    served = wanted("chat", binding(Mode.DEDICATED, 0), argv=[str(base / "closed/sub/tool")])
    assert kept_visible(base / "state", {}, served, NOBODY) == (str((base / "state").resolve()),)


def test_reachable_by_mode_bits(base: Path) -> None:
    groups = {65534}
    assert reachable_as(base / "open" / "bin", 65534, groups)
    assert not reachable_as(base / "closed" / "sub", 65534, groups)
    assert not reachable_as(base / "missing", 65534, groups)
    owner = os.stat(base / "closed").st_uid
    assert reachable_as(base / "closed" / "sub", owner, set())  # its owner may (0700)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_the_owner_and_the_group_of_a_closed_folder_may_pass(base: Path) -> None:
    os.chown(base / "closed", 65534, 0)
    assert reachable_as(base / "closed" / "sub", 65534, {65534})
    os.chown(base / "closed", 0, 65534)
    (base / "closed").chmod(0o710)
    assert reachable_as(base / "closed" / "sub", 4242, {65534})  # by its group
    assert not reachable_as(base / "closed" / "sub", 4242, {4242})
