"""Jobs benchmark, end to end, the processes: `gpuplex up` on simulated GPUs as a user runs it, or
`gpuplex server` + `gpuplex host run --follow-store` with the intervals given, each on a scratch
state directory and free ports, from the working tree or from another commit's tree (`Source`).

Everything runs in one scratch folder (`Scratch`) that the tenants' users and the gateway's user
can pass through; `Scratch.close` (leaving its `with` block, on an error or Ctrl-C too) stops
every stack still running, brings its tenants' processes down (`gpuplex host down
--forget-users`, with the stack's own code) and removes the folder. A stack that does not start
raises `StackError` with the end of its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import httpx
import yaml
from tests.e2e.gateway.stack import ROOT, free_port

from bench.gateway_procs import tail_lines
from gpuplex.clock import monotonic_s, sleep_s
from gpuplex.settings import full_environment

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 120.0
#: Where the scratch folders go: /tmp rather than $TMPDIR, which may be a folder of root's that
#: the tenants' users and the gateway's cannot pass through.
SCRATCH_PARENT = Path("/tmp")  # noqa: S108 - a private folder (mkdtemp) is made in it
SCRATCH_PREFIX = "gpuplex-bench-jobs-"
TOKEN = re.compile(r"\bgpt_[A-Za-z0-9_-]+")
ADMIN_TOKEN_LINE = re.compile(r"admin token\s+(gpt_\S+)")


class StackError(RuntimeError):
    """A stack did not start (or a tree's code cannot be run); the message says what and shows
    the end of its log."""


@dataclass(frozen=True)
class Source:
    """A tree whose gpuplex is run: `name` ("before", "after") keys its runs, `label` says what it
    is (a commit, the working tree), `root` is where its src/ is."""

    name: str
    label: str
    root: Path

    @property
    def src(self) -> Path:
        return self.root / "src"

    def environment(self) -> dict[str, str]:
        """This process's environment with the tree's src/ first on PYTHONPATH (ahead of the
        virtualenv's editable install of the working tree)."""
        env = full_environment()
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        return env | {"PYTHONPATH": os.pathsep.join([str(self.src), *rest]), "NO_COLOR": "1"}

    def cli(self) -> list[str]:
        return [sys.executable, "-m", "gpuplex.cli"]


def working_tree() -> Source:
    return Source("after", "the working tree", ROOT)


#: Run under a tree's src/: where it imports gpuplex from, and the intervals it runs with unless
#: told otherwise (the job runner's and the host runtime's defaults).
_PROBE = """\
import dataclasses, json, pathlib, gpuplex
from gpuplex import settings
def default(cls, name):
    found = [f.default for f in dataclasses.fields(cls) if f.name == name]
    return found[0] if found else None
print(json.dumps({
    "module": str(pathlib.Path(gpuplex.__file__).resolve()),
    "runner_interval_s": default(settings.ServerSettings, "jobs_interval_s"),
    "host_interval_s": default(settings.HostSettings, "interval_s"),
}))
"""


@dataclass(frozen=True)
class Defaults:
    runner_interval_s: float | None
    host_interval_s: float | None


def probe(source: Source) -> Defaults:
    """That `source`'s code is what runs (gpuplex imported from its src/), and its intervals.
    Raises StackError."""
    done = subprocess.run(  # noqa: S603 - our interpreter, a script of ours
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        env=source.environment(),
        cwd=source.root,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    found = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    if found is None or not Path(found["module"]).is_relative_to(source.src.resolve()):
        raise StackError(
            f"{source.name} ({source.label}): gpuplex is not imported from {source.src}:\n"
            f"{tail_lines(done.stdout + done.stderr)}"
        )
    return Defaults(found["runner_interval_s"], found["host_interval_s"])


@dataclass
class Stack:
    """A running control plane and host runtime on simulated GPUs, and how to reach them."""

    label: str
    source: Source
    home: Path  # this stack's folder in the scratch folder
    host_dir: Path  # the host runtime's state directory (its events.jsonl)
    url: str = ""  # the control plane, e.g. http://127.0.0.1:8090
    token: str = ""  # a platform-admin token, as `gpuplex up` prints it or `token create` makes
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: how `stop` asks it to stop
    _stop_signal: ClassVar[int] = signal.SIGTERM

    @property
    def events_path(self) -> Path:
        return self.host_dir / "events.jsonl"

    def log(self, name: str) -> Path:
        return self.home / f"{name}.log"

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log(name)
        return tail_lines(path.read_text(errors="replace"), lines) if path.exists() else ""

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with self.log(name).open("ab") as log:
            process = subprocess.Popen(  # noqa: S603 - our own CLI, arguments built here
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.source.environment() | {"COLUMNS": "300"},
                cwd=self.source.root,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the benchmark only
            )
        self.processes.append(process)
        return process

    def wait_for_host(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the host runtime has run the applied revision once (its first `revision`
        event): from then on it follows the store."""

        def followed() -> bool:
            return any(e.get("kind") == "revision" for e in read_events(self.events_path))

        self._wait(followed, "the host runtime running the applied revision", "host", timeout_s)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait(self, ready: Callable[[], bool], what: str, log: str, timeout_s: float) -> None:
        deadline = monotonic_s() + timeout_s
        while monotonic_s() < deadline:
            if ready():
                return
            for process in self.processes:
                if process.poll() is not None:
                    raise StackError(
                        f"{self.label} · {self.source.name}: a process exited with status "
                        f"{process.returncode} before {what}; the log ({self.log(log)}) "
                        f"ends:\n{self.log_tail(log)}"
                    )
            sleep_s(0.1)
        raise StackError(
            f"{self.label} · {self.source.name}: {what}: not within {timeout_s:g} s; the log "
            f"({self.log(log)}) ends:\n{self.log_tail(log)}"
        )

    def stop(self) -> None:
        """SIGINT to `gpuplex up` (its Ctrl-C: it stops everything, tenants included), SIGTERM
        to a server and host runtime; SIGKILL to a process group still there after
        STOP_TIMEOUT_S; then `gpuplex host down --forget-users` for any tenant left."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, self._stop_signal)
        for process in self.processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.processes.clear()
        if not self.host_dir.exists():
            return
        # the tree's own CLI; the working tree's if that tree is already gone
        source = self.source if self.source.root.is_dir() else working_tree()
        down = [*source.cli(), "host", "down", "--state-dir", str(self.host_dir)]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(  # noqa: S603 - our own CLI
                [*down, "--forget-users"],
                capture_output=True,
                timeout=STOP_TIMEOUT_S,
                env=source.environment(),
                cwd=source.root,
                check=False,
            )


class UpStack(Stack):
    """`gpuplex up SPEC --driver sim` as a user runs it: the job runner's and the host's
    intervals are the tree's defaults (`up` has no flag for them)."""

    _stop_signal: ClassVar[int] = signal.SIGINT

    def start(self, spec: dict[str, Any]) -> None:
        spec_path = self.home / "gpuplex.yaml"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [*self.source.cli(), "up", str(spec_path), "--state-dir", str(self.home / "up")]
        self.spawn("up", [*argv, "--driver", "sim", "--port", str(port)])

        def banner() -> bool:
            found = ADMIN_TOKEN_LINE.search(self.log("up").read_text(errors="replace"))
            if found is not None:
                self.token = found[1]
            return found is not None and self.healthy()

        self._wait(banner, "the banner with the admin token", "up", START_TIMEOUT_S)
        self.wait_for_host()


class ServerHostStack(Stack):
    """`gpuplex server --spec SPEC --jobs-interval-s R` and `gpuplex host run --follow-store
    --interval H` on its store, as two processes (tests/e2e/jobs/stack.py does the same); a
    platform-admin token from `gpuplex token create`."""

    def start(self, spec: dict[str, Any], runner_interval_s: float, host_interval_s: float) -> None:
        spec_path = self.home / "gpuplex.yaml"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        (self.home / "store").mkdir(mode=0o700)
        store = f"sqlite:///{self.home / 'store' / 'gpuplex.db'}"
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [*self.source.cli(), "server", "--store", store, "--port", str(port)]
        argv += ["--spec", str(spec_path)]  # it reads the host's events from the store
        self.spawn("server", [*argv, "--jobs-interval-s", f"{runner_interval_s:g}"])
        self._wait(self.healthy, "the control plane answering /healthz", "server", START_TIMEOUT_S)
        self.token = self._create_token(store)
        argv = [*self.source.cli(), "host", "run", "--follow-store", store, "--state-dir"]
        argv += [str(self.host_dir), "--driver", "sim", "--interval", f"{host_interval_s:g}"]
        self.spawn("host", argv)
        self.wait_for_host()

    def _create_token(self, store: str) -> str:
        argv = [*self.source.cli(), "token", "create", "--name", "bench", "--store", store]
        done = subprocess.run(  # noqa: S603 - our own CLI
            argv,
            capture_output=True,
            text=True,
            env=self.source.environment() | {"COLUMNS": "300"},
            cwd=self.source.root,
            check=False,
        )
        found = TOKEN.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise StackError(
                f"{self.label} · {self.source.name}: `gpuplex token create` failed:\n"
                f"{tail_lines(done.stdout + done.stderr)}"
            )
        return found[0]


def read_events(path: Path) -> list[dict[str, Any]]:
    """The host runtime's events (one JSON object a line); a line being written is skipped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


S = TypeVar("S", bound=Stack)


class Scratch:
    """The benchmark's scratch folder and the stacks started in it; `close` stops them all
    (with SIGINT and SIGTERM ignored meanwhile, so a second Ctrl-C cannot cut the clean-up
    short) and removes the folder."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=SCRATCH_PARENT))
        self.root.chmod(0o711)  # the tenants' users and the gateway's pass through
        self.stacks: list[Stack] = []

    def __enter__(self) -> Scratch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def up(self, label: str, source: Source) -> UpStack:
        home = self._home()
        return self._add(UpStack(label, source, home, home / "up" / "host"))

    def server_host(self, label: str, source: Source) -> ServerHostStack:
        home = self._home()
        return self._add(ServerHostStack(label, source, home, home / "host"))

    def stop(self, stack: Stack) -> None:
        with _signals_ignored():
            stack.stop()
        if stack in self.stacks:
            self.stacks.remove(stack)

    def close(self) -> None:
        """Every stack stopped, the last started first (one that fails to stop does not keep the
        others running), then the folder removed."""
        with _signals_ignored():
            try:
                while self.stacks:
                    stack = self.stacks.pop()
                    try:
                        stack.stop()
                    except Exception as error:  # say it, and stop the rest
                        print(f"{stack.label}: could not stop it all: {error}", file=sys.stderr)
            finally:
                shutil.rmtree(self.root, ignore_errors=True)

    def _home(self) -> Path:
        home = self.root / f"stack-{len(list(self.root.iterdir()))}"
        home.mkdir()
        home.chmod(0o711)
        return home

    def _add(self, stack: S) -> S:
        self.stacks.append(stack)
        return stack


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
