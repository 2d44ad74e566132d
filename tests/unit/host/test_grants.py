"""Whether a tenant's user can read a folder granted to it (`reads`): all of it, by owner, group and
mode bits, from / down; and each refusal says which path is closed, how, and what to do."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.core.plan.model import Mode
from gpuplex.errors import HostActionError
from gpuplex.host.grants import Reader, cannot_read, field_of, granted_reads, unreadable_grants
from gpuplex.specfile import load_spec_text
from tests.unit.core.apply.factories import binding, host, wanted

NOBODY = Reader("tenant acme's user nobody", 65534, frozenset({65534}))
NEW_USER = Reader("tenant acme's user gpx-new", None, frozenset())  # made on first start


@pytest.fixture
def model() -> Iterator[Path]:
    """A model folder anyone may read, in a folder anyone may enter (tmp_path is 700)."""
    base = Path(tempfile.mkdtemp(prefix="gpuplex-grants-"))
    base.chmod(0o755)
    folder = base / "model"
    (folder / "tokenizer").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "tokenizer/vocab.json"):
        (folder / name).write_text("{}")
        (folder / name).chmod(0o644)
    try:
        yield folder
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("reader", [NOBODY, NEW_USER])
def test_a_folder_open_to_others_is_readable(model: Path, reader: Reader) -> None:
    assert cannot_read(model, reader) is None


@pytest.mark.parametrize(
    ("closed", "mode", "says"),
    [
        (
            "model.safetensors",
            0o600,
            "cannot read {path} (owner {owner}, group {group}, mode -rw-------)",
        ),
        ("tokenizer", 0o700, "cannot read {path} (owner {owner}, group {group}, mode drwx------)"),
        ("tokenizer", 0o744, "mode drwxr--r--"),  # listed but not entered
        ("", 0o711, "cannot read the folder (owner {owner}, group {group}, mode drwx--x--x)"),
    ],
)
def test_a_closed_file_or_folder_inside_is_named(
    model: Path, closed: str, mode: int, says: str
) -> None:
    path = model / closed if closed else model
    path.chmod(mode)
    info = path.stat()
    owner = _name(info.st_uid, user=True)
    group = _name(info.st_gid, user=False)
    why = cannot_read(model, NOBODY)
    assert why is not None
    assert says.format(path=path, owner=owner, group=group) in why
    assert f"chmod -R o+rX {model}" in why


def test_a_folder_above_that_others_cannot_enter_is_named(model: Path) -> None:
    model.parent.chmod(0o700)
    why = cannot_read(model, NOBODY)
    assert why is not None
    assert why.startswith(f"tenant acme's user nobody cannot enter {model.parent} above it")
    assert f"chmod o+x {model.parent}" in why


def test_missing_paths_and_files_are_said_so(model: Path) -> None:
    assert cannot_read(model / "absent", NOBODY) == (
        "no such folder on this host: create it (the model, the adapter), or fix the path"
    )
    assert cannot_read(model / "absent" / "deeper", NOBODY) == (
        f"no such folder on this host ({model / 'absent'} does not exist): fix the path"
    )
    assert cannot_read(model / "config.json", NOBODY) == (
        "not a folder: grant the folder that holds it"
    )


def test_the_owner_and_group_bits_apply_to_the_owner_and_members(model: Path) -> None:
    (model / "model.safetensors").chmod(0o640)
    info = (model / "model.safetensors").stat()
    member = Reader("member", 4242, frozenset({info.st_gid}))
    owner = Reader("owner", info.st_uid, frozenset())
    assert cannot_read(model, member) is None
    assert cannot_read(model, owner) is None
    assert cannot_read(model, NOBODY) is not None


def test_unreadable_grants_are_said_once_per_workload_and_folder(model: Path) -> None:
    (model / "config.json").chmod(0o600)
    reads = [str(model.parent), str(model)]
    replicas = [
        wanted("chat", binding(Mode.DEDICATED, gpu), replica=gpu, reads=reads, unix_user="nobody")
        for gpu in (0, 1)
    ]
    job = wanted("job-1", binding(Mode.DEDICATED, 2), job=True, reads=reads)
    as_root = os.geteuid() == 0
    found = unreadable_grants(host([], [*replicas, job]), "abcdef", as_root=as_root)
    if not as_root:  # gpuplex's own user reads them: it owns them
        assert found == []
        return
    assert [(u.workload, u.index, u.folder) for u in found] == [
        ("chat", 0, str(model.parent)),
        ("chat", 1, str(model)),
    ]
    assert found[1].line().startswith(f"acme/chat: reads[1] {model}: tenant acme's user nobody")


def test_a_start_fails_naming_a_folder_closed_since_the_apply(model: Path) -> None:
    replica = wanted("chat", binding(Mode.DEDICATED, 0), reads=[str(model)])
    assert granted_reads(replica, NOBODY) == ((str(model), os.path.realpath(model)),)
    (model / "config.json").chmod(0o600)
    with pytest.raises(HostActionError, match=rf"reads\[0\] {model}: .* cannot read"):
        granted_reads(replica, NOBODY)
    assert granted_reads(replica, None) == ((str(model), os.path.realpath(model)),)  # root


SPEC = """
version: 1
fleet:
  nodes:
    - name: box
      gpus: [{model: H100-80GB, count: 2}]
tenants:
  - name: other
    workloads: [{name: w, gpu: {count: 1}, command: [x]}]
  - name: acme
    workloads:
      - name: train
        gpu: {count: 1}
        command: [x]
      - name: chat
        gpu: {count: 1}
        command: [x]
        reads: [/models/a, /models/b]
"""


def test_a_problem_is_placed_at_the_granting_field() -> None:
    spec = load_spec_text(SPEC, source="gpuplex.yaml")
    assert field_of(spec, "acme", "chat", 1) == ("tenants", 1, "workloads", 1, "reads", 1)


def _name(number: int, *, user: bool) -> str:
    import grp
    import pwd

    try:
        return pwd.getpwuid(number).pw_name if user else grp.getgrgid(number).gr_name
    except KeyError:
        return f"uid {number}" if user else f"gid {number}"
