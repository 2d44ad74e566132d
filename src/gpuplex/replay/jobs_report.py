"""What `gpuplex simulate --arrivals trace` reports of a jobs replay, per tenant and over time.

- queueing delay: first start - arrival, p50 and p99 over the pods that started;
- fair share: the queue tree's `fair_shares` (gpuplex.core.queues.fair_share: guarantees first,
  then weighted DRF up to each tenant's demand and limit) with each tenant's demand at the sample
  (GPUs of its running and queued pods); a FIFO run is measured against the same tree's shares;
- Jain's fairness index at a sample, over the tenants with a fair share above 0:
  (sum x)^2 / (n sum x^2) with x = allocated / fair share (1 = everyone at its fair share);
  its mean over the run's samples, and over those at which some pod waited (where it can
  differ from 1: when nothing waits every tenant holds what it asks);
- GPU allocation: the GPUs of a tenant's running pods; preemptions: times its pods were preempted.
Pure.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.core.queues.fair_share import fair_shares
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.replay.jobs import JobsReplay


@dataclass(frozen=True, slots=True)
class TenantRow:
    run: str  # "<rules> + <policy>"
    tenant: str
    pods: int
    started: int
    delay_p50_s: float | None
    delay_p99_s: float | None
    mean_gpus: float
    mean_fair_gpus: float
    preemptions: int


@dataclass(frozen=True, slots=True)
class Timeline:
    """A run over time: per sample, each tenant's GPUs and fair share, and Jain's index."""

    run: str
    times_s: list[float]
    allocated: dict[str, list[float]]
    fair: dict[str, list[float]]
    jain: list[float]
    #: per sample: whether some pod waited (some tenant's demand above what it held)
    contended: list[bool]

    @property
    def mean_jain(self) -> float:
        return float(np.mean(self.jain)) if self.jain else 1.0

    @property
    def mean_jain_contended(self) -> float:
        """Jain's index over the samples at which some pod waited (1 when none did)."""
        values = [j for j, c in zip(self.jain, self.contended, strict=True) if c]
        return float(np.mean(values)) if values else 1.0


def run_name(result: JobsReplay) -> str:
    return f"{result.rules} + {result.policy}"


def timeline(result: JobsReplay, tree: QueueTree) -> Timeline:
    """Allocation, fair shares and Jain's index at each of the run's samples."""
    gpus = QueueTree.of(tree.root, {GPUS: result.capacity_gpus}, tree.half_life_s)
    tenants = tree.tenant_names()
    allocated: dict[str, list[float]] = {t: [] for t in tenants}
    fair: dict[str, list[float]] = {t: [] for t in tenants}
    jain: list[float] = []
    contended: list[bool] = []
    for sample in result.samples:
        contended.append(
            any(v > sample.allocated.get(t, 0.0) + 1e-9 for t, v in sample.demand.items())
        )
        demands = {t: {GPUS: sample.demand.get(t, 0.0)} for t in tenants}
        shares = fair_shares(gpus, demands)
        ratios = []
        for t in tenants:
            got, due = sample.allocated.get(t, 0.0), shares[t].get(GPUS, 0.0)
            allocated[t].append(got)
            fair[t].append(due)
            if due > 1e-9:
                ratios.append(got / due)
        jain.append(jain_index(ratios))
    times = [s.time_s for s in result.samples]
    return Timeline(run_name(result), times, allocated, fair, jain, contended)


def jain_index(values: Sequence[float]) -> float:
    """(sum x)^2 / (n sum x^2); 1 for no values or all zero."""
    x = np.asarray(values, dtype=float)
    square = float((x * x).sum())
    return 1.0 if x.size == 0 or square == 0.0 else float(x.sum() ** 2 / (x.size * square))


def tenant_rows(result: JobsReplay, line: Timeline) -> list[TenantRow]:
    rows = []
    for tenant in line.allocated:
        mine = [r for r in result.records if r.tenant == tenant]
        delays = [d for r in mine if (d := r.delay_s) is not None]
        p50, p99 = np.percentile(delays, [50, 99]).tolist() if delays else [None, None]
        rows.append(
            TenantRow(
                line.run,
                tenant,
                len(mine),
                len(delays),
                p50,
                p99,
                float(np.mean(line.allocated[tenant])) if line.times_s else 0.0,
                float(np.mean(line.fair[tenant])) if line.times_s else 0.0,
                sum(r.preemptions for r in mine),
            )
        )
    return rows


def csv_text(rows: Sequence[TenantRow], lines: Sequence[Timeline]) -> str:
    """One row per run and tenant, with the run's mean Jain index."""
    jain = {line.run: f"{line.mean_jain:.4f},{line.mean_jain_contended:.4f}" for line in lines}
    out = io.StringIO()
    out.write(
        "run,tenant,pods,started,delay_p50_s,delay_p99_s,mean_gpus,mean_fair_gpus,"
        "preemptions,mean_jain,mean_jain_while_pods_wait\n"
    )
    for r in rows:
        p50 = "" if r.delay_p50_s is None else f"{r.delay_p50_s:.1f}"
        p99 = "" if r.delay_p99_s is None else f"{r.delay_p99_s:.1f}"
        out.write(
            f"{r.run},{r.tenant},{r.pods},{r.started},{p50},{p99},{r.mean_gpus:.3f},"
            f"{r.mean_fair_gpus:.3f},{r.preemptions},{jain[r.run]}\n"
        )
    return out.getvalue()
