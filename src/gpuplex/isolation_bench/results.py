"""From each tenant's step latencies to the tables of `gpuplex bench isolation`. Pure.

Throughput is samples per second (steps x batch over the measured window); latency is the time of
one step (one batch through the chain), p50 and p99 by nearest rank. A scenario's aggregate is the
sum over its tenants; `vs exclusive` divides it by the exclusive run at the same batch size.
Interference is the steady tenant's p99 beside a heavy neighbour over its p99 alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplex.isolation_bench.scenarios import STEADY, Scenario, SharingPattern


@dataclass(frozen=True, slots=True)
class TenantRun:
    """What one tenant's loop wrote (gpuplex.isolation_bench.loop)."""

    tenant: str
    batch: int
    thread_percent: int | None
    latencies_s: tuple[float, ...]
    window_s: float
    started_at: float  # wall clock
    late_s: float


@dataclass(frozen=True, slots=True)
class TenantResult:
    tenant: str
    batch: int
    thread_percent: int | None
    steps: int
    samples_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: Scenario
    tenants: tuple[TenantResult, ...]
    overlap_s: float  # how long every tenant was measuring at once

    @property
    def samples_per_s(self) -> float:
        return sum(t.samples_per_s for t in self.tenants)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q % of the values at or below it."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(run: TenantRun) -> TenantResult:
    if not run.latencies_s or run.window_s <= 0:
        raise ValueError(f"{run.tenant} measured no step")
    return TenantResult(
        tenant=run.tenant,
        batch=run.batch,
        thread_percent=run.thread_percent,
        steps=len(run.latencies_s),
        samples_per_s=len(run.latencies_s) * run.batch / run.window_s,
        p50_ms=percentile(run.latencies_s, 50) * 1000,
        p99_ms=percentile(run.latencies_s, 99) * 1000,
    )


def scenario_result(scenario: Scenario, runs: Sequence[TenantRun]) -> ScenarioResult:
    starts = [r.started_at for r in runs]
    ends = [r.started_at + r.window_s for r in runs]
    return ScenarioResult(
        scenario=scenario,
        tenants=tuple(summarize(r) for r in runs),
        overlap_s=max(0.0, min(ends) - max(starts)),
    )


def exclusive_at(results: Sequence[ScenarioResult], batch: int) -> ScenarioResult | None:
    for result in results:
        if result.scenario.pattern is SharingPattern.EXCLUSIVE and result.scenario.batch == batch:
            return result
    return None


def versus_exclusive(result: ScenarioResult, results: Sequence[ScenarioResult]) -> float | None:
    """Aggregate throughput over the exclusive run's at the same batch (None where none ran)."""
    baseline = exclusive_at(results, result.scenario.batch)
    if baseline is None or baseline.samples_per_s == 0:
        return None
    return result.samples_per_s / baseline.samples_per_s


@dataclass(frozen=True, slots=True)
class Interference:
    scenario: str
    alone_p99_ms: float
    crowded_p99_ms: float
    heavy_samples_per_s: float

    @property
    def ratio(self) -> float:
        return self.crowded_p99_ms / self.alone_p99_ms


def interference(results: Sequence[ScenarioResult]) -> list[Interference]:
    """The steady tenant's p99 in each steady+heavy scenario against exclusive at batch 1."""
    alone = exclusive_at(results, 1)
    if alone is None:
        return []
    found = []
    for result in results:
        steady = [t for t in result.tenants if t.tenant == STEADY]
        if not steady:
            continue
        heavy = sum(t.samples_per_s for t in result.tenants if t.tenant != STEADY)
        found.append(
            Interference(result.scenario.name, alone.tenants[0].p99_ms, steady[0].p99_ms, heavy)
        )
    return found
