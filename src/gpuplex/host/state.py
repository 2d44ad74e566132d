"""The host runtime's files under the state directory:

    desired.json     what to run: the spec file, its plan and this node's desired host (`host apply`)
    state.json       what runs: a record per replica (pid, start time, cgroup, GPU), MPS daemons
    events.jsonl     what happened, one JSON object per line, append-only
    supervisor.lock  held by the one process that acts on this host
    logs/            per-replica stdout and stderr;  mps/  MPS pipe and log directories;  sim/

Every write is atomic (temporary file, fsync, rename): a crash of gpuplex never leaves half a file."""

from __future__ import annotations

import fcntl
import hashlib
import os
from datetime import datetime
from pathlib import Path
from typing import IO, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuplex.core.apply.model import DesiredHost, FinishedRun, MpsDaemonRecord, WorkloadRecord
from gpuplex.core.plan.model import Plan
from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.errors import HostStateError

#: The most bytes of new events read at once (the host's reports to the store).
EVENTS_READ_BYTES = 1024 * 1024


class _StateModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DesiredFile(_StateModel):
    format_version: Literal[1] = 1
    #: the applied revision this is: the control plane's number (`host run --follow-store`), or
    #: counted here by `host apply` (0 in files written before revisions were recorded)
    revision: int = 0
    spec_path: str
    spec_sha256: str
    driver: str
    plan: Plan
    node: NodeSpec
    host: DesiredHost
    applied_at: datetime


class HostState(_StateModel):
    format_version: Literal[1] = 1
    records: list[WorkloadRecord] = Field(default_factory=list)
    mps_daemons: list[MpsDaemonRecord] = Field(default_factory=list)
    owned_mig: dict[int, list[str]] = Field(default_factory=dict)
    #: how the last run of each job that ended here ended, until the control plane has it
    finished: list[FinishedRun] = Field(default_factory=list)


class Event(_StateModel):
    at: datetime
    kind: str
    target: str
    message: str
    fields: dict[str, str | int | float | None] = Field(default_factory=dict)


class StateDir:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.mps = root / "mps"
        self.sim = root / "sim"
        self.homes = root / "homes"

    @property
    def instance(self) -> str:
        """This gpuplex instance's name on the host: a digest of the state directory's absolute
        path. Its cgroups live under `gpuplex/<instance>`, so instances never touch each other's."""
        absolute = os.path.realpath(self.root)
        return hashlib.sha256(absolute.encode()).hexdigest()[:12]

    def create(self) -> None:
        """Make the directories. The root is 711: tenants, which run as other users, pass through
        it to their own directory under homes/, to MPS pipes and to the simulated driver, but
        cannot list it; every file gpuplex keeps in it is 600 and the logs are 700."""
        for path in (self.root, self.logs, self.mps, self.sim):
            path.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)
        self.logs.chmod(0o700)
        for path in (self.mps, self.sim):
            path.chmod(0o711)
        for name in ("desired.json", "state.json", "events.jsonl", "supervisor.lock"):
            if (self.root / name).is_file():  # made by an older gpuplex, under a 700 root
                (self.root / name).chmod(0o600)

    # --- desired.json ---------------------------------------------------------------------------
    def read_desired(self) -> DesiredFile | None:
        return _read(self.root / "desired.json", DesiredFile)

    def write_desired(self, desired: DesiredFile) -> None:
        _write_atomic(self.root / "desired.json", desired.model_dump_json(indent=1))

    # --- state.json -----------------------------------------------------------------------------
    def read_state(self) -> HostState:
        return _read(self.root / "state.json", HostState) or HostState()

    def write_state(self, state: HostState) -> None:
        _write_atomic(self.root / "state.json", state.model_dump_json(indent=1))

    # --- events.jsonl ---------------------------------------------------------------------------
    def append_event(self, event: Event) -> None:
        with open(self.root / "events.jsonl", "a", opener=_private) as out:
            out.write(event.model_dump_json() + "\n")
            out.flush()
            os.fsync(out.fileno())

    def events(self, last: int | None = None) -> list[Event]:
        """The events, oldest first; only the `last` ones if given, read from the end of the file
        (it only grows, and status pages and the control plane want the newest)."""
        path = self.root / "events.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines() if last is None else _last_lines(path, last)
        return _parsed(lines)

    def events_since(
        self, offset: int, max_bytes: int = EVENTS_READ_BYTES
    ) -> tuple[list[Event], int]:
        """The events written from byte `offset` of events.jsonl on (whole lines only; when more
        than `max_bytes` came, only the newest of them), and the offset to read from next. A file
        shorter than `offset` (a new one) is read from its start."""
        try:
            with open(self.root / "events.jsonl", "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                offset = offset if offset <= size else 0
                start = max(offset, size - max_bytes)
                handle.seek(start)
                data = handle.read(size - start)
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        body = data[:end]
        if start > offset:  # the first line read is only the end of one
            body = body[body.find(b"\n") + 1 :]
        return _parsed(body.decode("utf-8", errors="replace").splitlines()), start + end

    # --- the supervisor lock --------------------------------------------------------------------
    def try_lock(self) -> IO[str] | None:
        """Hold supervisor.lock (until the returned file is closed or the process dies), or None
        when another gpuplex process holds it."""
        handle = open(self.root / "supervisor.lock", "a+", opener=_private)  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return handle

    def lock_holder(self) -> int | None:
        path = self.root / "supervisor.lock"
        if not path.exists():
            return None
        handle = self.try_lock()
        if handle is not None:
            handle.close()
            return None
        text = path.read_text().strip()
        return int(text) if text.isdigit() else None


M = TypeVar("M", bound=BaseModel)


def _parsed(lines: list[str]) -> list[Event]:
    found = []
    for line in lines:
        try:
            found.append(Event.model_validate_json(line))
        except ValidationError:
            continue  # a line cut short by a crash mid-write
    return found


def _last_lines(path: Path, count: int, block_bytes: int = 65536) -> list[str]:
    """The last `count` lines of a text file, reading backwards a block at a time."""
    if count <= 0:
        return []
    with path.open("rb") as file:
        end = file.seek(0, os.SEEK_END)
        data = b""
        while end > 0 and data.count(b"\n") <= count:
            start = max(0, end - block_bytes)
            file.seek(start)
            data = file.read(end - start) + data
            end = start
    return data.decode(errors="replace").splitlines()[-count:]


def _read(path: Path, model: type[M]) -> M | None:
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_text())
    except ValidationError as error:
        raise HostStateError(
            f"{path}: not a gpuplex state file ({error.error_count()} problems: "
            f"{error.errors()[0]['msg']}). Move it aside to start afresh; running workloads will "
            "not be adopted."
        ) from None


def _private(path: str, flags: int) -> int:
    """An `opener` that makes new files 600."""
    return os.open(path, flags, 0o600)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", opener=_private) as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
