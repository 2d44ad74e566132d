"""The container runtime: a replica with an image runs under docker or podman (`host.runtime`), with
its GPU by UUID, CPU and memory limits, a read-only root, every capability dropped and a network of
its tenant's own, run as the tenant's unprivileged user (the same uid as its processes would get,
see core/apply/users.py). Names, labels and networks carry the gpuplex instance, so two instances
on one host never remove each other's containers. The engine keeps the logs (`docker logs
gpuplex-<instance>-<tenant>-<workload>-<replica>`); liveness is the container's main process, read
through /proc like any other replica."""

from __future__ import annotations

import shutil
import subprocess

from gpuplex.core.apply.launch import container_argv, container_name, container_network
from gpuplex.core.apply.model import ExitStatus, WorkloadDesired, WorkloadRecord
from gpuplex.core.spec.runtime import Network
from gpuplex.errors import HostActionError
from gpuplex.host.launcher import Started, Swept, UserChooser
from gpuplex.host.proc import is_same_process, start_ticks

#: What a container gets from gpuplex's environment: only these (the rest is the host's).
CONTAINER_VARIABLES = ("CUDA_", "GPUPLEX_")


class ContainerRuntime:
    def __init__(self, engine: str, instance: str, users: UserChooser) -> None:
        self.name = engine
        self.engine = engine
        self.instance = instance
        self.users = users

    def start(self, wanted: WorkloadDesired, env: dict[str, str]) -> Started:
        if shutil.which(self.engine) is None:
            raise HostActionError(
                f"host.runtime is {self.engine} but `{self.engine}` is not installed on this host"
            )
        if wanted.network is Network.HOST:
            self._ensure_network(container_network(wanted.tenant, self.instance))
        name = container_name(wanted, self.instance)
        user = self.users.user_of(wanted)
        self._engine("rm", "--force", name, check=False)  # a leftover from an earlier run
        ours = {k: v for k, v in env.items() if k.startswith(CONTAINER_VARIABLES)}
        devices = [d for d in env.get("GPUPLEX_DEVICE_UUIDS", "").split(",") if d]
        if "CUDA_MPS_PIPE_DIRECTORY" in ours:
            devices = []  # MPS clients reach the GPU through the daemon's pipe, not a device
        # gpuplex's GPU variables win over the workload's own: a spec's env cannot widen the GPU
        # share it was given (CUDA_VISIBLE_DEVICES, the MPS limits), as for processes
        passed = {**wanted.env, **ours}
        run_as = None if user is None else (user.uid, user.gid)
        argv = container_argv(self.engine, wanted, devices, passed, self.instance, run_as)
        self._engine(*argv[1:])
        pid_text = self._engine("inspect", "--format", "{{.State.Pid}}", name).strip()
        if not pid_text.isdigit() or pid_text == "0":
            raise HostActionError(f"{self.engine} started {name} but it is not running")
        pid = int(pid_text)
        limits = wanted.limits
        applied = (
            f"{self.engine}: cpus {limits.cpu_cores or 'unlimited'}, memory "
            f"{f'{round(limits.memory_gib * 1024)} MiB' if limits.memory_gib else 'unlimited'}"
        )
        return Started(pid=pid, start_ticks=start_ticks(pid), cgroups=[], limits_applied=applied)

    def exit_status(self, record: WorkloadRecord) -> ExitStatus | None:
        if record.pid is not None and is_same_process(record.pid, record.start_ticks):
            return None
        name = container_name(record.desired, self.instance)
        code = self._engine("inspect", "--format", "{{.State.ExitCode}}", name, check=False).strip()
        if code.lstrip("-").isdigit():
            return ExitStatus(code=int(code))
        return ExitStatus(note=f"container {name} is gone")

    def ask_to_stop(self, record: WorkloadRecord) -> None:
        """Nothing ahead of time: `docker stop` sends the stop signal and waits in one call, and a
        second SIGTERM could cut a server's drain short. Containers stop one after another."""

    def stop(self, record: WorkloadRecord, grace_s: float) -> None:
        name = container_name(record.desired, self.instance)
        self._engine("stop", "--time", str(max(0, round(grace_s))), name, check=False)

    def release(self, record: WorkloadRecord) -> None:
        self._engine("rm", "--force", container_name(record.desired, self.instance), check=False)

    def empty(self, record: WorkloadRecord) -> list[int]:
        return []  # the engine stops a container's processes with its main one

    def sweep(self) -> Swept:
        return Swept({}, {})  # every recorded container was stopped and removed by `down`'s pass

    def _ensure_network(self, network: str) -> None:
        if self._run("network", "inspect", network).returncode != 0:
            self._engine("network", "create", "--label", "gpuplex=1", network)

    def _engine(self, *args: str, check: bool = True) -> str:
        """The engine's stdout; a failure raises (check) or gives ""."""
        done = self._run(*args)
        if done.returncode != 0 and check:
            raise HostActionError(
                f"{self.engine} {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done.stdout if done.returncode == 0 else ""

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(  # noqa: S603 - argv built by gpuplex
                [self.engine, *args], capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise HostActionError(f"{self.engine} {args[0]}: {error}") from None
