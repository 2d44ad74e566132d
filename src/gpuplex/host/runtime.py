"""The reconcile loop of one host: observe -> core.apply.diff -> act -> record. Each tick is
idempotent; state is saved after every tick, so a gpuplex killed at any moment re-adopts its running
replicas when it starts again and restarts none of them.

A job (a process replica never restarted) that leaves the desired state is stopped without
holding up the pass: SIGTERM now, its record `stopping` with the deadline of its grace period, and
on a later pass, once its process has exited or the deadline has passed, SIGKILL to whatever is
left of it and its cgroup emptied; the record goes once nothing of it runs. Many jobs stopped
together drain at the same time, and the host keeps working meanwhile. How each job's run ended
is kept until the control plane has it (host/finished.py)."""

from __future__ import annotations

from gpuplex.clock import now_s, utc_now
from gpuplex.core.apply import actions as act
from gpuplex.core.apply.diff import diff, forget_removed, mig_key
from gpuplex.core.apply.launch import gpu_environment
from gpuplex.core.apply.model import (
    LIVE_PHASES,
    DesiredHost,
    ExitStatus,
    Phase,
    WorkloadDesired,
    WorkloadRecord,
)
from gpuplex.core.apply.restart import after_exit, after_health_check, check_interval_s
from gpuplex.core.spec.runtime import Runtime
from gpuplex.errors import GpuplexError, HostActionError
from gpuplex.host import job_stops
from gpuplex.host.devices import device_uuids, mps_pipe
from gpuplex.host.driver import GpuDriver
from gpuplex.host.finished import (
    ended_at_s,
    finished_run,
    forget,
    never_restarted,
    remember,
    status_unknown,
    write_header,
)
from gpuplex.host.health import HealthProber
from gpuplex.host.launcher import Launcher, unit_name
from gpuplex.host.logs import rotate_if_large
from gpuplex.host.mps import MpsControl
from gpuplex.host.observe import GpuSnapshot, observation, snapshot
from gpuplex.host.ports import port_taken
from gpuplex.host.proc import pid_list
from gpuplex.host.state import Event, HostState, StateDir
from gpuplex.settings import HostSettings


class HostRuntime:
    def __init__(
        self,
        dirs: StateDir,
        settings: HostSettings,
        driver: GpuDriver,
        mps: MpsControl,
        launchers: dict[Runtime, Launcher],
        base_env: dict[str, str],
        *,
        record_events: bool = True,
    ) -> None:
        self.record_events = record_events
        self.dirs = dirs
        self.settings = settings
        self.driver = driver
        self.mps = mps
        self.launchers = launchers
        self.base_env = base_env
        self.state: HostState = dirs.read_state()
        self.prober = HealthProber()
        self.events: list[Event] = []
        self._checked_at: dict[str, float] = {}
        self._blocked_said: dict[str, str] = {}
        self._asked: set[str] = set()  # labels sent SIGTERM ahead of their stop
        #: set by `down`: why every replica stops (what the jobs' runs are told ended them)
        self.stopping_everything: str | None = None

    # --- start-up -----------------------------------------------------------------------------
    def adopt(self) -> None:
        """Take over replicas a previous gpuplex started: the same pid with the same start time is
        the same process, so it keeps running untouched; anything else is gone."""
        now = now_s()
        records = []
        for record in self.state.records:
            if record.phase in LIVE_PHASES and record.pid is not None:
                ended = self._launcher(record.desired).exit_status(record)
                if ended is None:
                    self._event(
                        "adopted", record.label, f"running as pid {record.pid}", pid=record.pid
                    )
                else:
                    lost = status_unknown(ended)
                    note = (
                        "gone while gpuplex was not running, and nothing recorded how it ended"
                        if lost
                        else "exited while gpuplex was not running"
                    )
                    self._finished(record, ended.model_copy(update={"note": note}), now, lost=lost)
                    record = after_exit(record, ended.model_copy(update={"note": note}), now)
                    self._event("exited", record.label, f"{note}; {record.message}")
            records.append(record)
        self.state = self.state.model_copy(update={"records": records})
        self.dirs.write_state(self.state)

    def forget_finished(self, labels: set[str]) -> None:
        """Drop how the runs of `labels` ended: the control plane has it."""
        self.state = forget(self.state, labels)

    def ask_all_to_stop(self) -> None:
        """SIGTERM every live replica at once, before a pass that stops them all (`down`): each
        then drains at the same time as the others, and stopping takes one grace period, not one
        per replica."""
        for record in self.state.records:
            if record.phase in LIVE_PHASES and record.pid is not None:
                try:
                    self._launcher(record.desired).ask_to_stop(record)
                except GpuplexError:
                    continue  # the pass that follows stops it, or says why it cannot
                self._asked.add(record.label)

    def stopping(self) -> list[str]:
        """The replicas asked to stop whose processes are not gone yet."""
        return [r.label for r in self.state.records if r.phase is Phase.STOPPING]

    def sweep(self) -> list[str]:
        """After a pass that stopped everything (`down`): kill whatever of this instance still
        runs, in any replica cgroup, recorded or not (a failed replica's daemons, say), and
        remove the cgroups. Returns what could not be stopped, as `label: pids`."""
        left: list[str] = []
        for launcher in {id(item): item for item in self.launchers.values()}.values():
            swept = launcher.sweep()
            for label, pids in swept.stopped.items():
                self._event("leftovers_stopped", label, f"killed {_count(pids)}: {pid_list(pids)}")
            for label, pids in swept.left.items():
                left.append(f"{label}: pids {pid_list(pids)}")
                self._event("leftovers_remain", label, f"could not stop pids {pid_list(pids)}")
        return left

    def _empty(self, record: WorkloadRecord) -> None:
        """The main process of a replica ended: nothing it started may outlive it."""
        try:
            left = self._launcher(record.desired).empty(record)
        except GpuplexError as error:
            self._event("leftovers_remain", record.label, error.message)
            return
        if left:
            self._event("leftovers_remain", record.label, f"could not stop pids {pid_list(left)}")

    # --- one pass -------------------------------------------------------------------------------
    def tick(self, desired: DesiredHost, *, dry_run: bool = False) -> list[act.HostAction]:
        now = now_s()
        records = self.state.records if dry_run else self._finish_stops(self.state.records, now)
        records = self._notice_exits(records, now)
        records = self._check_health(records, now)
        gpu = snapshot(self.driver, records)
        seen = observation(
            gpu,
            records,
            self.state.mps_daemons,
            self.mps,
            self.state.owned_mig,
            desired.settings.vram_tolerance_percent,
        )
        actions = diff(desired, seen, now)
        if dry_run:
            return actions
        self.state = self.state.model_copy(update={"records": records})
        for action in actions:
            self._act(action, gpu)
        self.state = self.state.model_copy(
            update={"records": forget_removed(self.state.records, desired)}
        )
        self._rotate_logs(desired.settings.log_max_mib * 1024 * 1024, desired.settings.log_keep)
        self.dirs.write_state(self.state)
        return actions

    def _notice_exits(self, records: list[WorkloadRecord], now: float) -> list[WorkloadRecord]:
        updated = []
        for record in records:
            if record.phase in LIVE_PHASES and record.pid is not None:
                ended = self._launcher(record.desired).exit_status(record)
                if ended is not None:
                    asked = record.label in self._asked  # gpuplex stopped it (`down`), not itself
                    self._asked.discard(record.label)
                    by = (self.stopping_everything or "stopped") if asked else None
                    self._finished(record, ended, now, lost=status_unknown(ended), stopped_by=by)
                    record = after_exit(record, ended, now)
                    failed = record.phase is Phase.FAILED
                    kind = "stopped" if asked else "failed" if failed else "exited"
                    self._event(kind, record.label, record.message or "", pid=None)
                    self._empty(record)
                elif record.phase is Phase.STARTING and record.desired.health is None:
                    record = record.model_copy(update={"phase": Phase.RUNNING})
            updated.append(record)
        return updated

    def _check_health(self, records: list[WorkloadRecord], now: float) -> list[WorkloadRecord]:
        due: dict[str, tuple[int, str, float]] = {}
        for record in records:
            health, port = record.desired.health, record.desired.health_port
            if record.phase not in LIVE_PHASES or health is None or port is None:
                continue
            if now - self._checked_at.get(record.label, 0.0) >= check_interval_s(record):
                due[record.label] = (port, health.http_path, health.timeout_s)
        if not due:
            return records
        verdicts = self.prober.probe_all(due)
        updated = []
        for record in records:
            if record.label in verdicts:
                self._checked_at[record.label] = now
                ok = verdicts[record.label]
                before, failures_before = record.phase, record.health_failures
                record = after_health_check(record, ok, now)
                if before is Phase.STARTING and record.phase is Phase.RUNNING:
                    self._event(
                        "healthy", record.label, f"answers health checks (pid {record.pid})"
                    )
                if record.health_failures > failures_before:  # not while it is still starting
                    self._event(
                        "health_failed", record.label, f"failed check {record.health_failures}"
                    )
            updated.append(record)
        return updated

    # --- acting -----------------------------------------------------------------------------------
    def _act(self, action: act.HostAction, gpu: GpuSnapshot) -> None:
        try:
            match action:
                case act.StopWorkload():
                    self._stop(action.label, action.reason, counts_as_exit=action.counts_as_exit)
                case act.VramStop():
                    self._event(
                        "vram_exceeded",
                        action.label,
                        act.describe(action),
                        tenant=action.tenant,
                        workload=action.workload,
                        planned_mib=action.planned_mib,
                        observed_mib=action.observed_mib,
                        limit_mib=action.limit_mib,
                    )
                    self._stop(action.label, "stopped by the VRAM watchdog", counts_as_exit=True)
                case act.DestroyMigInstance():
                    self.driver.destroy_mig_instance(action.gpu_index, action.gi_id)
                    self._own_mig(
                        action.gpu_index, mig_key(action.profile, action.start_slot), False
                    )
                    self._event("mig_destroyed", f"GPU {action.gpu_index}", act.describe(action))
                case act.CreateMigInstance():
                    mig = action.slice
                    self.driver.create_mig_instance(
                        action.gpu_index, mig.profile_id, mig.start_slot
                    )
                    self._own_mig(action.gpu_index, mig_key(mig.profile, mig.start_slot), True)
                    self._event("mig_created", f"GPU {action.gpu_index}", act.describe(action))
                case act.StartMpsDaemon():
                    self._start_mps(action.gpu_index, action.reason, gpu)
                case act.StopMpsDaemon():
                    self._stop_mps(action.gpu_index, action.reason)
                case act.StartWorkload():
                    self._start(action.desired, action.reason)
                case act.Blocked():
                    if self._blocked_said.get(action.target) != action.reason:
                        self._blocked_said[action.target] = action.reason
                        self._event("blocked", action.target, action.reason)
        except GpuplexError as error:
            self._event(
                "action_failed", _target(action), f"{act.describe(action)}: {error.message}"
            )

    def _start(self, wanted: WorkloadDesired, reason: str) -> None:
        if wanted.port is not None and port_taken("0.0.0.0", wanted.port):  # noqa: S104 - a probe
            # Someone else listens there (another gpuplex instance, a forgotten server): starting
            # would only crash-loop. Said once; tried again on every pass until the port is free.
            why = (
                f"port {wanted.port} is in use by a process that is not this replica: it starts "
                f"once the port is free (who listens: ss -ltnp 'sport = :{wanted.port}')"
            )
            if self._blocked_said.get(wanted.label) != why:
                self._blocked_said[wanted.label] = why
                self._event("port_in_use", wanted.label, why)
            return
        self._blocked_said.pop(wanted.label, None)
        previous = self._record(wanted.label)
        restarts = previous.restarts + 1 if previous and previous.phase is Phase.BACKOFF else 0
        exits = previous.exits_at_s if previous and previous.phase is Phase.BACKOFF else []
        if previous is not None and previous.phase not in LIVE_PHASES:
            self._launcher(previous.desired).release(previous)
        devices = device_uuids(self.driver, wanted)
        pipe_dir = mps_pipe(self.state.mps_daemons, wanted)
        env = {
            **self.base_env,
            **wanted.env,
            **self.driver.client_env(),
            **gpu_environment(wanted, devices, pipe_dir),
            "GPUPLEX_TENANT": wanted.tenant,
            "GPUPLEX_WORKLOAD": wanted.workload,
            "GPUPLEX_REPLICA": str(wanted.replica),
            "GPUPLEX_DEVICE_UUIDS": ",".join(devices),
            "GPUPLEX_GPU_MEMORY_MIB": str(wanted.binding.memory_mib),
        }
        if wanted.port is not None:
            env["GPUPLEX_PORT"] = str(wanted.port)
        now = now_s()
        record = WorkloadRecord(
            desired=wanted,
            phase=Phase.STARTING,
            restarts=restarts,
            exits_at_s=exits,
            started_at_s=now,
            last_exit=previous.last_exit if previous and previous.phase is Phase.BACKOFF else None,
        )
        try:
            write_header(self.dirs.logs, wanted, now)
            started = self._launcher(wanted).start(wanted, env)
        except (OSError, GpuplexError) as error:
            detail = error.message if isinstance(error, GpuplexError) else str(error)
            failed = ExitStatus(note=f"could not start: {detail}")
            self._finished(record, failed, now)
            record = after_exit(record, failed, now)
            self._put(record)
            self._event(
                "failed" if record.phase is Phase.FAILED else "exited",
                wanted.label,
                record.message or "",
            )
            return
        record = record.model_copy(
            update={
                "pid": started.pid,
                "start_ticks": started.start_ticks,
                "cgroups": started.cgroups,
                "limits_applied": started.limits_applied,
                "device": ",".join(devices),
            }
        )
        self._put(record)
        self._event("started", wanted.label, f"pid {started.pid}: {reason}", pid=started.pid)

    def _stop(self, label: str, reason: str, *, counts_as_exit: bool) -> None:
        record = self._record(label)
        if record is None:
            return
        reason = self.stopping_everything or reason
        if not counts_as_exit and job_stops.stops_in_passes(record):
            asked = record.label in self._asked
            self._asked.discard(record.label)
            launcher = self._launcher(record.desired)
            self._put(job_stops.begin(launcher, record, reason, now_s(), asked=asked))
            grace = f"{record.desired.restart.stop_grace_s:g}"
            why = f"{reason}: SIGTERM sent, SIGKILL in {grace} s if it still runs"
            self._event("stopping", label, why, pid=record.pid)
            return
        self._launcher(record.desired).stop(record, float(record.desired.restart.stop_grace_s))
        self._event("stopped", label, reason, pid=record.pid)
        if counts_as_exit:
            self._finished(record, ExitStatus(note=reason), now_s())
            self._put(after_exit(record, ExitStatus(note=reason), now_s()))
        else:
            self._finished(record, ExitStatus(note=reason), now_s(), stopped_by=reason)
            self._launcher(record.desired).release(record)
            self._drop(label)

    def _finish_stops(self, records: list[WorkloadRecord], now: float) -> list[WorkloadRecord]:
        """Drop the stopping jobs that are over (host/job_stops.py), remembering how each ended."""
        kept = []
        for record in records:
            over = None
            if record.phase is Phase.STOPPING:
                try:
                    over = job_stops.finish(self._launcher(record.desired), record, now)
                except GpuplexError as error:
                    self._event("action_failed", record.label, f"stopping it: {error.message}")
            if over is None or self._left(record, over.left):
                kept.append(record)
                continue
            reason = record.stop_reason or "stopped"
            self._finished(record, over.ended, now, stopped_by=reason)
            self._launcher(record.desired).release(record)
            self._event(
                "stopped", record.label, f"{reason}: {over.ended.describe()}", pid=record.pid
            )
        return kept

    def _left(self, record: WorkloadRecord, pids: list[int]) -> bool:
        """Whether something of `record` could not be stopped (said once per replica and pids)."""
        why = f"could not stop pids {pid_list(pids)}" if pids else None
        if why is not None and self._blocked_said.get(record.label) != why:
            self._event("leftovers_remain", record.label, why)
        if why is None:
            self._blocked_said.pop(record.label, None)
        else:
            self._blocked_said[record.label] = why
        return why is not None

    def _finished(
        self,
        record: WorkloadRecord,
        ended: ExitStatus,
        now: float,
        *,
        stopped_by: str | None = None,
        lost: bool = False,
    ) -> None:
        """Remember how the run of a replica that is never restarted ended (a job's attempt): at
        the time its launching shell recorded, else `now`."""
        if not never_restarted(record.desired):
            return
        at = ended_at_s(self.dirs.logs, record, now)
        run = finished_run(record, ended, at, stopped_by=stopped_by, lost=lost)
        self.state = remember(self.state, run)

    def _start_mps(self, gpu_index: int, reason: str, gpu: GpuSnapshot) -> None:
        uuid = next((g.uuid for g in gpu.gpus if g.index == gpu_index), None)
        if uuid is None:
            raise HostActionError(f"GPU {gpu_index} is not on this host")
        old = next((d for d in self.state.mps_daemons if d.gpu_index == gpu_index), None)
        if old is not None:
            self._event(
                "mps_daemon_died", f"GPU {gpu_index}", f"pid {old.pid} is gone", pid=old.pid
            )
            self.mps.stop(old)
        base = self.dirs.mps / uuid
        daemon = self.mps.start(gpu_index, uuid, base / "pipe", base / "log")
        daemon = daemon.model_copy(update={"restarts": old.restarts + 1 if old else 0})
        daemons = [d for d in self.state.mps_daemons if d.gpu_index != gpu_index] + [daemon]
        self.state = self.state.model_copy(update={"mps_daemons": daemons})
        self._event(
            "mps_daemon_started", f"GPU {gpu_index}", f"pid {daemon.pid}: {reason}", pid=daemon.pid
        )

    def _stop_mps(self, gpu_index: int, reason: str) -> None:
        for daemon in self.state.mps_daemons:
            if daemon.gpu_index == gpu_index:
                self.mps.stop(daemon)
                self._event("mps_daemon_stopped", f"GPU {gpu_index}", reason, pid=daemon.pid)
        daemons = [d for d in self.state.mps_daemons if d.gpu_index != gpu_index]
        self.state = self.state.model_copy(update={"mps_daemons": daemons})

    def _launcher(self, wanted: WorkloadDesired) -> Launcher:
        launcher = self.launchers.get(wanted.runtime)
        if launcher is None:
            raise HostActionError(f"no {wanted.runtime} runtime on this host for {wanted.label}")
        return launcher

    # --- helpers ------------------------------------------------------------------------------------
    def _own_mig(self, gpu_index: int, key: str, owned: bool) -> None:
        mine = dict(self.state.owned_mig)
        keys = [k for k in mine.get(gpu_index, []) if k != key] + ([key] if owned else [])
        mine[gpu_index] = keys
        self.state = self.state.model_copy(update={"owned_mig": mine})

    def _record(self, label: str) -> WorkloadRecord | None:
        return next((r for r in self.state.records if r.label == label), None)

    def _put(self, record: WorkloadRecord) -> None:
        others = [r for r in self.state.records if r.label != record.label]
        self.state = self.state.model_copy(update={"records": [*others, record]})

    def _drop(self, label: str) -> None:
        self.state = self.state.model_copy(
            update={"records": [r for r in self.state.records if r.label != label]}
        )

    def _rotate_logs(self, max_bytes: int, keep: int) -> None:
        for record in self.state.records:
            folder = self.dirs.logs / record.desired.tenant
            for stream in ("stdout", "stderr"):
                path = folder / f"{unit_name(record.desired)}.{stream}.log"
                rotate_if_large(path, max_bytes, keep)

    def _event(
        self, kind: str, target: str, message: str, **fields: str | int | float | None
    ) -> None:
        event = Event(at=utc_now(), kind=kind, target=target, message=message, fields=fields)
        self.events.append(event)
        if self.record_events:
            self.dirs.append_event(event)

    def close(self) -> None:
        self.prober.close()


def _target(action: act.HostAction) -> str:
    match action:
        case act.StartWorkload(desired=wanted):
            return wanted.label
        case act.StopWorkload(label=label) | act.VramStop(label=label):
            return label
        case act.Blocked(target=target):
            return target
        case _:
            return f"GPU {getattr(action, 'gpu_index', '?')}"


def _count(pids: list[int]) -> str:
    return f"{len(pids)} leftover process" + ("" if len(pids) == 1 else "es")
