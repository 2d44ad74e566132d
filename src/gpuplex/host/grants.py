"""The host folders a workload is granted in the spec (`reads`: its model, its LoRA adapters), and
whether the user its replicas run as can read them.

Nothing is guessed from a command's arguments: a replica under a private /tmp sees of the host's
/tmp only gpuplex's state directory, its program's folder, its PYTHONPATH and the folders granted
to it, the granted ones read-only. Before anything changes, `host apply` and `gpuplex up` check
that the tenant's user can read each granted folder, all of it (every folder above it entered,
every folder in it listed and entered, every file in it read), by owner, group and mode bits as
the kernel would, and refuse the spec naming the field, the folder, the path that is closed and
how to open it: otherwise the model server finds out itself, as a misleading FileNotFoundError
from deep in its loader, and crash-loops."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuplex.core.apply.model import DesiredHost, WorkloadDesired
from gpuplex.core.apply.users import replica_user, runs_as_root
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import FieldPath, HostActionError, SpecProblem
from gpuplex.host.proc import user_ids

#: How many entries under a granted folder are checked at most (a model is a few dozen files).
MAX_CHECKED = 20_000

READ, WRITE, ENTER = 4, 2, 1


@dataclass(frozen=True, slots=True)
class Reader:
    """Who reads the granted folders: the replica's user. `uid` None: a tenant user gpuplex has
    yet to make, who will own nothing and be in no group but its own new one."""

    name: str  # as said in a message: "tenant acme's user gpx-1a2b3c-acme"
    uid: int | None
    gids: frozenset[int]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A folder granted to a workload that its replicas' user cannot read, and why."""

    tenant: str
    workload: str
    index: int  # in the workload's `reads`
    folder: str
    why: str

    def line(self) -> str:
        """In launch_problems' form: `tenant/workload: ...`."""
        return f"{self.tenant}/{self.workload}: reads[{self.index}] {self.folder}: {self.why}"

    def problem(self, spec: GpuplexSpec) -> SpecProblem:
        """As a problem at the field of the spec that grants the folder."""
        return SpecProblem(field_of(spec, self.tenant, self.workload, self.index), self.why)


def field_of(spec: GpuplexSpec, tenant: str, workload: str, index: int) -> FieldPath:
    for t, tenant_spec in enumerate(spec.tenants):
        if tenant_spec.name != tenant:
            continue
        for w, workload_spec in enumerate(tenant_spec.workloads):
            if workload_spec.name == workload:
                return ("tenants", t, "workloads", w, "reads", index)
    return ("tenants",)


def reader_of(wanted: WorkloadDesired, instance: str, *, as_root: bool) -> Reader | None:
    """The user a replica runs as (host/launcher.py UserChooser), or None for root, who reads
    everything."""
    if not as_root:
        gids = frozenset({os.getgid(), *os.getgroups()})
        try:
            name = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            name = f"uid {os.getuid()}"
        return Reader(name, os.getuid(), gids)
    if runs_as_root(wanted):
        return None
    name = replica_user(wanted, instance)
    said = f"tenant {wanted.tenant}'s user {name}"
    ids = user_ids(name)
    if ids is None:
        return Reader(said, None, frozenset())
    return Reader(said, ids[0], frozenset(os.getgrouplist(name, ids[1])))


def unreadable_grants(host: DesiredHost, instance: str, *, as_root: bool) -> list[Unreadable]:
    """Every folder granted to a process replica of `host` that its user cannot read, once per
    workload and folder."""
    found: dict[tuple[str, str, int], Unreadable] = {}
    for wanted in host.workloads:
        if wanted.job or not wanted.reads:
            continue
        reader = reader_of(wanted, instance, as_root=as_root)
        if reader is None:
            continue
        for index, folder in enumerate(wanted.reads):
            key = (wanted.tenant, wanted.workload, index)
            if key in found:
                continue
            why = cannot_read(Path(folder), reader)
            if why is not None:
                found[key] = Unreadable(wanted.tenant, wanted.workload, index, folder, why)
    return list(found.values())


def granted_reads(wanted: WorkloadDesired, reader: Reader | None) -> tuple[tuple[str, str], ...]:
    """(path in the replica, the folder it is on the host) of each folder granted to it, checked
    again as it starts: a folder closed since the apply fails the start, naming it."""
    if wanted.job:
        return ()
    granted = []
    for index, folder in enumerate(wanted.reads):
        why = cannot_read(Path(folder), reader) if reader is not None else None
        if why is not None:
            raise HostActionError(f"reads[{index}] {folder}: {why}")
        granted.append((folder, os.path.realpath(folder)))
    return tuple(granted)


def cannot_read(folder: Path, reader: Reader) -> str | None:
    """Why `reader` cannot read all of `folder`, in words that say how to open it; None when it
    can."""
    fix = f"make it readable by that user (e.g. chmod -R o+rX {folder}), or grant another folder"
    for above in reversed(folder.parents):
        info = _stat(above)
        if info is None:
            return f"no such folder on this host ({above} does not exist): fix the path"
        if not allows(info, reader, ENTER):
            return (
                f"{reader.name} cannot enter {above} above it ({_describe(info)}): "
                f"make that passable (chmod o+x {above}) or grant a folder elsewhere"
            )
    info = _stat(folder)
    if info is None:
        return "no such folder on this host: create it (the model, the adapter), or fix the path"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder: grant the folder that holds it"
    closed = _first_closed(folder, info, reader)
    if closed is None:
        return None
    path, closed_info = closed
    what = "the folder" if path == folder else str(path)
    return f"{reader.name} cannot read {what} ({_describe(closed_info)}): {fix}"


def allows(info: os.stat_result, reader: Reader, want: int) -> bool:
    """Whether the mode bits let `reader` do `want` (READ, WRITE, ENTER; or-ed): the owner's bits
    for its owner, else the group's for a member, else the others'. An ACL is not read: a path
    it alone opens counts as closed, the safe side."""
    mode = info.st_mode
    if reader.uid is not None and info.st_uid == reader.uid:
        bits = (mode >> 6) & 7
    elif info.st_gid in reader.gids:
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    return bits & want == want


def _first_closed(
    folder: Path, info: os.stat_result, reader: Reader
) -> tuple[Path, os.stat_result] | None:
    if not allows(info, reader, READ | ENTER):
        return folder, info
    checked = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            checked += 1
            if checked > MAX_CHECKED:
                return None
            path = Path(root) / name
            entry = _stat(path)
            if entry is None:
                continue  # a dangling link, or gone meanwhile: nothing to read there
            want = READ | ENTER if stat.S_ISDIR(entry.st_mode) else READ
            if not allows(entry, reader, want):
                return path, entry
    return None


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _describe(info: os.stat_result) -> str:
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = f"uid {info.st_uid}"
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = f"gid {info.st_gid}"
    return f"owner {owner}, group {group}, mode {stat.filemode(info.st_mode)}"
