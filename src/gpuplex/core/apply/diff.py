"""diff(desired, observed) -> actions: the whole reconcile decision for one host, pure and idempotent
(applying its actions and diffing again gives nothing new to do).

Order: stop what must stop; reshape MIG only on GPUs whose layout differs; start, restart or stop
MPS daemons; start what should run. GPUs that need an operator (MIG mode, lost GPU) are blocked with
the command to run, never switched implicitly."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuplex.core.apply.actions import (
    Blocked,
    CreateMigInstance,
    DestroyMigInstance,
    HostAction,
    StartMpsDaemon,
    StartWorkload,
    StopMpsDaemon,
    StopWorkload,
)
from gpuplex.core.apply.model import (
    LIVE_PHASES,
    ApplyModel,
    DesiredHost,
    GpuDesired,
    GpuStatus,
    MigInstanceStatus,
    MpsDaemonRecord,
    Phase,
    WorkloadDesired,
    WorkloadRecord,
)
from gpuplex.core.apply.restart import health_verdict
from gpuplex.core.apply.watchdog import vram_violation
from gpuplex.core.plan.model import MigSlicePlan, Mode
from gpuplex.core.spec.runtime import RestartPolicy


class HostObservation(ApplyModel):
    """Everything the decision needs from the world, gathered by the host runtime."""

    gpus: list[GpuStatus]
    records: list[WorkloadRecord]
    mps_daemons: list[MpsDaemonRecord]
    mps_alive: dict[int, bool]  # GPU index -> its MPS daemon answers
    gpu_memory_by_label: dict[str, int]  # replica label -> GPU memory its processes use (MiB)
    device_users: dict[str, list[str]]  # GPU or MIG device UUID -> who has it open
    owned_mig: dict[int, list[str]]  # GPU index -> "profile@start" instances gpuplex created
    vram_tolerance_percent: int = 10


def mig_key(profile: str, start_slot: int) -> str:
    return f"{profile}@{start_slot}"


@dataclass
class _Diff:
    desired: DesiredHost
    seen: HostObservation
    now_s: float
    actions: list[HostAction] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)  # label -> why, stopped cleanly here
    blocked_gpus: dict[int, str] = field(default_factory=dict)
    blocked_slices: dict[tuple[int, str], str] = field(default_factory=dict)
    dead_mps: set[int] = field(default_factory=set)

    def run(self) -> list[HostAction]:
        gpus = {gpu.index: gpu for gpu in self.seen.gpus}
        for wanted_gpu in self.desired.gpus:
            self._check_gpu(wanted_gpu, gpus.get(wanted_gpu.index))
        self.dead_mps = {
            d.gpu_index for d in self.seen.mps_daemons if not self.seen.mps_alive.get(d.gpu_index)
        }
        self._stops()
        for wanted_gpu in self.desired.gpus:
            status = gpus.get(wanted_gpu.index)
            # A GPU blocked for its MIG mode still sheds the instances gpuplex made and no longer
            # needs, so that the operator can switch the mode.
            if status is not None and not status.lost:
                self._reshape_mig(wanted_gpu, status)
        self._mps_daemons()
        self._starts()
        return self.actions

    # --- GPUs ----------------------------------------------------------------------------------
    def _check_gpu(self, wanted: GpuDesired, status: GpuStatus | None) -> None:
        whole_users = any(
            w.binding.mode is not Mode.MIG and wanted.index in w.binding.gpu_indices
            for w in self.desired.workloads
        )
        if status is None:
            reason = f"GPU {wanted.index} is not on this host: check the fleet in the spec"
        elif status.lost:
            reason = f"GPU {wanted.index} ({status.uuid}) is lost: its replicas stay down until it is back"
        elif wanted.mig_slices and not status.mig_enabled:
            reason = (
                f"GPU {wanted.index} must be in MIG mode for its planned slices: "
                f"run `gpuplex host mig-mode {wanted.index} on`"
            )
        elif whole_users and status.mig_enabled:
            reason = (
                f"GPU {wanted.index} is in MIG mode but the plan runs it whole: "
                f"run `gpuplex host mig-mode {wanted.index} off`"
            )
        else:
            return
        self.blocked_gpus[wanted.index] = reason
        self.actions.append(Blocked(target=f"GPU {wanted.index}", reason=reason))

    def _reshape_mig(self, wanted: GpuDesired, status: GpuStatus) -> None:
        if not status.mig_enabled:
            return
        want = {mig_key(s.profile, s.start_slot): s for s in wanted.mig_slices or []}
        have = {mig_key(i.profile, i.start_slot): i for i in status.instances}
        missing = [s for key, s in want.items() if key not in have]
        extra = [i for key, i in have.items() if key not in want]
        owned = set(self.seen.owned_mig.get(status.index, []))
        doomed = [
            i
            for i in extra
            if mig_key(i.profile, i.start_slot) in owned or any(_overlaps(i, s) for s in missing)
        ]
        if not missing and not doomed:
            return  # geometry unchanged: this GPU is not touched
        in_use = {
            mig_key(i.profile, i.start_slot): users
            for i in doomed
            if (users := self._users_after_stops(i.device_uuid))
        }
        if in_use:
            detail = "; ".join(f"{key} used by {', '.join(u)}" for key, u in in_use.items())
            reason = f"refusing to destroy MIG instances still in use ({detail})"
            self.actions.append(Blocked(target=f"GPU {status.index}", reason=reason))
            for s in missing:
                self.blocked_slices[(status.index, mig_key(s.profile, s.start_slot))] = reason
            return
        for instance in doomed:
            self.actions.append(
                DestroyMigInstance(
                    gpu_index=status.index,
                    gi_id=instance.gi_id,
                    profile=instance.profile,
                    start_slot=instance.start_slot,
                    reason="not in the plan"
                    if mig_key(instance.profile, instance.start_slot) in owned
                    else "in the way of a planned slice",
                )
            )
        for s in sorted(missing, key=lambda s: (-s.size_slots, s.start_slot)):
            self.actions.append(CreateMigInstance(gpu_index=status.index, slice=s))

    def _users_after_stops(self, device_uuid: str) -> list[str]:
        return [u for u in self.seen.device_users.get(device_uuid, []) if u not in self.stopped]

    # --- replicas --------------------------------------------------------------------------------
    def _stops(self) -> None:
        wanted = {w.label: w for w in self.desired.workloads}
        for record in self.seen.records:
            if record.phase not in LIVE_PHASES:
                continue
            reason = self._stop_reason(record, wanted.get(record.label))
            if reason is not None:
                self.stopped[record.label] = reason
                self.actions.append(
                    StopWorkload(label=record.label, reason=reason, counts_as_exit=False)
                )
                continue
            verdict = health_verdict(record, self.now_s)
            if verdict is not None:
                self.actions.append(
                    StopWorkload(label=record.label, reason=verdict, counts_as_exit=True)
                )
                continue
            used = self.seen.gpu_memory_by_label.get(record.label)
            if used is not None:
                violation = vram_violation(record, used, self.seen.vram_tolerance_percent)
                if violation is not None:
                    self.actions.append(violation)

    def _stop_reason(self, record: WorkloadRecord, wanted: WorkloadDesired | None) -> str | None:
        if wanted is None:
            return "no longer in the plan"
        if wanted.binding != record.desired.binding:
            return f"moves from {record.desired.binding.describe()} to {wanted.binding.describe()}"
        if wanted != record.desired and record.desired.restart.policy is not RestartPolicy.NEVER:
            # a replica never restarted (a job) runs on as it started: a restart would run it
            # a second time
            return "its spec changed"
        blocked = [
            self.blocked_gpus[i] for i in wanted.binding.gpu_indices if i in self.blocked_gpus
        ]
        if blocked:
            return blocked[0]
        if wanted.binding.mode is Mode.MPS and wanted.binding.gpu_indices[0] in self.dead_mps:
            return (
                f"the MPS daemon of GPU {wanted.binding.gpu_indices[0]} died; "
                "its clients restart after it"
            )
        return None

    def _mps_daemons(self) -> None:
        needed = {g.index for g in self.desired.gpus if g.mps and g.index not in self.blocked_gpus}
        running = {d.gpu_index: d for d in self.seen.mps_daemons}
        for index in sorted(needed):
            if index not in running:
                self.actions.append(
                    StartMpsDaemon(gpu_index=index, reason="MPS clients are planned here")
                )
            elif index in self.dead_mps:
                self.actions.append(
                    StartMpsDaemon(
                        gpu_index=index,
                        reason="it died; restarting it, then only this GPU's MPS clients",
                    )
                )
        for index in sorted(set(running) - needed):
            self.actions.append(
                StopMpsDaemon(gpu_index=index, reason="no MPS clients planned here")
            )

    def _starts(self) -> None:
        records = {r.label: r for r in self.seen.records}
        for wanted in self.desired.workloads:
            record = None if wanted.label in self.stopped else records.get(wanted.label)
            reason = self._start_reason(wanted, record)
            if reason is None:
                continue
            blocked = self._blocked(wanted)
            if blocked is not None:
                if record is None or record.message != blocked:
                    self.actions.append(Blocked(target=wanted.label, reason=blocked))
                continue
            self.actions.append(StartWorkload(desired=wanted, reason=reason))

    def _start_reason(self, wanted: WorkloadDesired, record: WorkloadRecord | None) -> str | None:
        if record is None:
            return self.stopped.get(wanted.label, "planned here")
        if record.phase is Phase.STOPPING:
            return None  # it starts again once its earlier run is gone
        if record.desired != wanted and record.phase not in LIVE_PHASES:
            return "its spec changed"
        if record.phase is Phase.BACKOFF and (record.next_start_at_s or 0.0) <= self.now_s:
            return f"restart {record.restarts + 1} after {record.last_exit}"
        return None

    def _blocked(self, wanted: WorkloadDesired) -> str | None:
        for index in wanted.binding.gpu_indices:
            if index in self.blocked_gpus:
                return self.blocked_gpus[index]
        mig = wanted.binding.mig
        if mig is not None:
            return self.blocked_slices.get(
                (wanted.binding.gpu_indices[0], mig_key(mig.profile, mig.start_slot))
            )
        return None


def _overlaps(instance: MigInstanceStatus, planned: MigSlicePlan) -> bool:
    return (
        instance.start_slot < planned.start_slot + planned.size_slots
        and planned.start_slot < instance.start_slot + instance.size_slots
    )


def diff(desired: DesiredHost, observed: HostObservation, now_s: float) -> list[HostAction]:
    """The actions that bring this host from `observed` to `desired` at time `now_s`."""
    return _Diff(desired, observed, now_s).run()


def forget_removed(records: list[WorkloadRecord], desired: DesiredHost) -> list[WorkloadRecord]:
    """Drop records of replicas that are neither planned any more nor running (nor stopping)."""
    wanted = {w.label for w in desired.workloads}
    return [
        r
        for r in records
        if r.label in wanted or r.phase in LIVE_PHASES or r.phase is Phase.STOPPING
    ]
