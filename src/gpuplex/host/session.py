"""The operations behind `gpuplex host ...`: apply a spec, run the supervising loop, stop everything,
switch MIG mode on the operator's say-so. The CLI only parses options and prints."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Protocol

from gpuplex.clock import now_s, sleep_s, utc_now
from gpuplex.core.apply import actions as act
from gpuplex.core.apply.desired import desired_host, port_clashes
from gpuplex.core.apply.discover import discovered_node, with_discovered_fleet
from gpuplex.core.apply.model import LIVE_PHASES, DesiredHost
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.errors import HostActionError, HostBusyError, NotFoundError, SpecError, SpecProblem
from gpuplex.host.grants import Unreadable, unreadable_grants
from gpuplex.host.preflight import launch_problems
from gpuplex.host.sim_driver import models_memory
from gpuplex.host.state import DesiredFile, Event, HostState, StateDir
from gpuplex.host.tenant_users import remove_users
from gpuplex.host.wiring import open_driver, open_runtime
from gpuplex.settings import HostSettings, inherited_environment
from gpuplex.specfile import locate_in_text


def choose_node(spec: GpuplexSpec, wanted: str | None) -> NodeSpec:
    nodes = spec.fleet.nodes
    if wanted is not None:
        for node in nodes:
            if node.name == wanted:
                return node
        names = ", ".join(n.name for n in nodes) or "none"
        raise NotFoundError(f"no node {wanted!r} in the spec's fleet; nodes: {names}")
    if len(nodes) == 1:
        return nodes[0]
    names = ", ".join(n.name for n in nodes) or "none"
    raise NotFoundError(
        f"the fleet has {len(nodes)} nodes ({names}): say which one this is with --node"
    )


@dataclass
class Applied:
    plan: Plan
    desired: DesiredHost
    actions: list[act.HostAction]
    events: list[Event] = field(default_factory=list)
    supervisor_pid: int | None = None  # set when a running supervisor will do the work
    note: str | None = None
    problems: list[str] = field(default_factory=list)  # dry run: what would keep replicas down


def discover_fleet(spec: GpuplexSpec, spec_path: Path, settings: HostSettings) -> GpuplexSpec:
    """Fill an empty `fleet` with `discover: true` from this host's GPUs (NVML)."""
    if not spec.fleet.discover or spec.fleet.nodes:
        return spec
    if settings.driver == "sim":
        raise SpecError(
            str(spec_path),
            [
                SpecProblem(
                    ("fleet", "discover"), "simulated GPUs cannot be discovered: list fleet.nodes"
                )
            ],
        )
    dirs = StateDir(settings.state_dir)
    opened = open_driver(settings.with_driver("nvml"), dirs, None)
    try:
        gpus = opened.driver.gpus()
    finally:
        opened.driver.close()
    node = discovered_node(settings.node or socket.gethostname().split(".")[0].lower(), gpus)
    result = with_discovered_fleet(spec, node) if isinstance(node, NodeSpec) else node
    if isinstance(result, list):
        raise SpecError(str(spec_path), result)
    return result


#: What the host runs instead of a spec's commands, given the spec and its plan (the stand-ins
#: of `--stand-ins` and `gpuplex up` without a GPU); it may not change what is placed where.
SpecTransform = Callable[[GpuplexSpec, Plan], GpuplexSpec]


def prepare(
    spec: GpuplexSpec,
    spec_text: bytes,
    spec_path: Path,
    settings: HostSettings,
    *,
    dry_run: bool = False,
    transform: SpecTransform | None = None,
) -> tuple[DesiredFile, NodeSpec, list[str]]:
    """Apply a spec on a host without a control plane: plan it (against the plan this host runs,
    so what runs stays where it is) and derive this node's desired state. Also returns the node
    and what would keep replicas from starting (launch_problems; raised at once unless `dry_run`)."""
    spec = discover_fleet(spec, spec_path, settings)
    dirs = StateDir(settings.state_dir)
    previous = dirs.read_desired() if (settings.state_dir / "desired.json").exists() else None
    plan = make_plan(spec, current=previous.plan if previous else None)
    revision = previous.revision + 1 if previous is not None else 1
    sha256 = hashlib.sha256(spec_text).hexdigest()
    desired, problems, unreadable = desired_file(
        spec, plan, revision, sha256, str(spec_path), settings, transform
    )
    if unreadable and not dry_run:
        raise unreadable_error(spec, spec_text, spec_path, unreadable)
    if problems and not dry_run:
        raise HostActionError(f"{spec_path}: nothing was changed: " + "; ".join(problems))
    return desired, desired.node, problems + [u.line() for u in unreadable]


def unreadable_error(
    spec: GpuplexSpec, spec_text: bytes, spec_path: Path, unreadable: list[Unreadable]
) -> SpecError:
    """Folders granted in `reads` that the tenants' users cannot read, each at its line in the
    spec file: nothing was changed."""
    problems = [u.problem(spec) for u in unreadable]
    return SpecError(str(spec_path), locate_in_text(spec_text, str(spec_path), problems))


def desired_file(
    spec: GpuplexSpec,
    plan: Plan,
    revision: int,
    spec_sha256: str,
    source: str,
    settings: HostSettings,
    transform: SpecTransform | None = None,
) -> tuple[DesiredFile, list[str], list[Unreadable]]:
    """This node's desired state from an applied revision's spec and plan, as planned (never
    planned again), what would keep its replicas from starting, and the folders granted in
    `reads` that their users cannot read. Raises HostActionError for port clashes, NotFoundError
    when this node is not in the spec's fleet."""
    node = choose_node(spec, settings.node)
    run_spec = transform(spec, plan) if transform is not None else spec
    host = desired_host(run_spec, plan, node.name)
    clashes = port_clashes(host)
    if clashes:
        raise HostActionError(f"{source}: " + "; ".join(clashes))
    base_path = inherited_environment().get("PATH", os.defpath)
    as_root = os.geteuid() == 0
    problems = launch_problems(host, base_path, settings.state_dir, as_root=as_root)
    instance = StateDir(settings.state_dir).instance
    unreadable = unreadable_grants(host, instance, as_root=as_root)
    desired = DesiredFile(
        revision=revision,
        spec_path=source,
        spec_sha256=spec_sha256,
        driver=settings.driver,
        plan=plan,
        node=node,
        host=host,
        applied_at=utc_now(),
    )
    return desired, problems, unreadable


def store(
    spec: GpuplexSpec,
    spec_text: bytes,
    spec_path: Path,
    settings: HostSettings,
    transform: SpecTransform | None = None,
) -> None:
    """Record the spec as this host's desired state for the supervisor to apply on its next pass."""
    desired, _, _ = prepare(spec, spec_text, spec_path, settings, transform=transform)
    dirs = StateDir(settings.state_dir)
    dirs.create()
    dirs.write_desired(desired)


def apply(
    spec: GpuplexSpec,
    spec_text: bytes,
    spec_path: Path,
    settings: HostSettings,
    *,
    dry_run: bool,
    transform: SpecTransform | None = None,
) -> Applied:
    """Plan against what this host runs now, and make it so (or, with dry_run, say what it would do)."""
    if dry_run and not settings.state_dir.exists():
        # Nothing applied here yet: work out the answer in a scratch directory, create nothing.
        with tempfile.TemporaryDirectory(prefix="gpuplex-dry-run-") as scratch:
            scratch_settings = replace(settings, state_dir=Path(scratch))
            return apply(
                spec, spec_text, spec_path, scratch_settings, dry_run=True, transform=transform
            )
    desired, node, problems = prepare(
        spec, spec_text, spec_path, settings, dry_run=dry_run, transform=transform
    )
    dirs = StateDir(settings.state_dir)
    dirs.create()
    mig_on = desired.host.mig_gpus()
    opened = open_driver(settings, dirs, node, mig_on, models_memory(desired.plan))
    runtime = open_runtime(settings, dirs, opened.driver, record_events=not dry_run)
    try:
        if dry_run:
            return Applied(
                desired.plan,
                desired.host,
                runtime.tick(desired.host, dry_run=True),
                note=opened.note,
                problems=problems,
            )
        dirs.write_desired(desired)
        lock = dirs.try_lock()
        if lock is None:
            return Applied(
                desired.plan, desired.host, [], supervisor_pid=dirs.lock_holder(), note=opened.note
            )
        with lock:
            runtime.adopt()
            actions = runtime.tick(desired.host)
        return Applied(desired.plan, desired.host, actions, runtime.events, note=opened.note)
    finally:
        runtime.close()
        opened.driver.close()


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


class Follower(Protocol):
    def take_newest(self, state: HostState) -> DesiredFile | None:
        """A newer desired state than the last one taken (with what runs here: `state`), or
        None."""
        ...

    def after_tick(self, state: HostState) -> set[str]:
        """Tell the control plane what this pass saw; returns the replicas whose finished runs
        it now has (forgotten here)."""
        ...


def run(
    settings: HostSettings, *, max_ticks: int | None = None, follower: Follower | None = None
) -> None:
    """The supervising loop: take the desired state (from desired.json, or from the control
    plane's newest revision with a `follower`), reconcile, sleep; until SIGTERM or SIGINT. Leaves
    every replica running when it exits: a stop or crash of gpuplex never stops a tenant."""
    dirs = StateDir(settings.state_dir)
    dirs.create()
    lock = dirs.try_lock()
    if lock is None:
        raise HostBusyError(
            f"another gpuplex (pid {dirs.lock_holder()}) already supervises {settings.state_dir}"
        )
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with lock:
        first = follower.take_newest(dirs.read_state()) if follower else None
        desired = first or dirs.read_desired()
        if desired is None:
            raise HostActionError(f"nothing to run in {settings.state_dir}: give a spec file")
        mig_on = desired.host.mig_gpus()
        opened = open_driver(settings, dirs, desired.node, mig_on, models_memory(desired.plan))
        runtime = open_runtime(settings, dirs, opened.driver)
        try:
            runtime.adopt()
            ticks = 0
            while not stop.requested and (max_ticks is None or ticks < max_ticks):
                started = now_s()
                if follower is not None:
                    desired = follower.take_newest(runtime.state) or desired
                current = dirs.read_desired() or desired
                runtime.tick(current.host)
                if follower is not None:
                    runtime.forget_finished(follower.after_tick(runtime.state))
                ticks += 1
                sleep_s(max(0.0, settings.interval_s - (now_s() - started)))
        finally:
            runtime.close()
            opened.driver.close()


@dataclass
class Down:
    events: list[Event]
    left: list[str]  # `tenant/unit: pids ...` that could not be stopped
    users_removed: list[str] = field(default_factory=list)


#: What a job stopped by `gpuplex host down` is told ended it (the control plane queues it again).
HOST_DOWN = "gpuplex host down"


def down(settings: HostSettings, *, forget_users: bool = False, reason: str = HOST_DOWN) -> Down:
    """Stop every replica and MPS daemon of this instance (MIG instances stay), whatever phase
    each is in, and everything left in its replicas' cgroups; forget the desired state. A running
    supervisor is asked to exit first. Every replica is asked to stop at once and the jobs drain
    together; how each job's run ended (stopped, for `reason`) is kept for the control plane."""
    dirs = StateDir(settings.state_dir)
    if not dirs.root.is_dir():
        raise NotFoundError(
            f"there is no state directory {settings.state_dir}: nothing was applied there; give "
            "the --state-dir that `host apply` or `gpuplex up` used"
        )
    holder = dirs.lock_holder()
    if holder is not None:
        signal_pid(holder, signal.SIGTERM)
        deadline = now_s() + 30
        while dirs.lock_holder() is not None and now_s() < deadline:
            sleep_s(0.1)
    lock = dirs.try_lock()
    if lock is None:
        raise HostBusyError(
            f"gpuplex pid {dirs.lock_holder()} did not let go of {settings.state_dir}"
        )
    with lock:
        opened = open_driver(settings, dirs, None)
        runtime = open_runtime(settings, dirs, opened.driver)
        try:
            runtime.adopt()
            runtime.stopping_everything = reason
            runtime.ask_all_to_stop()
            empty = DesiredHost(node="", gpus=[], workloads=[])
            runtime.tick(empty)
            # the jobs' grace periods, all at once; what cannot be stopped is the sweep's to say
            deadline = now_s() + max_grace_s(runtime.state) + 10
            while runtime.stopping() and now_s() < deadline:
                sleep_s(0.05)
                runtime.tick(empty)
            left = runtime.sweep()
            (settings.state_dir / "desired.json").unlink(missing_ok=True)
            removed = []
            if forget_users and not left and os.geteuid() == 0:
                removed = remove_users(dirs.instance, dirs.homes)
            return Down(runtime.events, left, removed)
        finally:
            runtime.close()
            opened.driver.close()


def max_grace_s(state: HostState) -> float:
    """The longest grace period of the replicas being stopped."""
    return max((r.desired.restart.stop_grace_s for r in state.records), default=0.0)


def mig_mode_preview(settings: HostSettings, gpu_index: int) -> list[str]:
    """The replicas that run on a GPU now: switching its MIG mode would need them gone."""
    dirs = StateDir(settings.state_dir)
    state = dirs.read_state()
    return [
        r.label
        for r in state.records
        if r.phase in LIVE_PHASES and gpu_index in r.desired.binding.gpu_indices
    ]


def set_mig_mode(settings: HostSettings, gpu_index: int, enable: bool) -> None:
    busy = mig_mode_preview(settings, gpu_index)
    if busy:
        raise HostActionError(
            f"GPU {gpu_index} runs {', '.join(busy)}: stop them first (apply a spec without them, "
            "or `gpuplex host down`)"
        )
    dirs = StateDir(settings.state_dir)
    dirs.create()
    opened = open_driver(settings, dirs, None)
    try:
        opened.driver.set_mig_mode(gpu_index, enable)
    finally:
        opened.driver.close()
    dirs.append_event(
        Event(
            at=utc_now(),
            kind="mig_mode",
            target=f"GPU {gpu_index}",
            message=f"MIG mode {'enabled' if enable else 'disabled'} by the operator",
        )
    )


def signal_pid(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return


__all__ = ["Applied", "Down", "apply", "choose_node", "down", "run", "set_mig_mode"]
