"""GPU samples in the store: what each replica held on each GPU at each moment, as the NVML or DCGM
sampler (or the simulator) saw it. Appended in batches; read back by time window for metering;
pruned once rolled up and older than the retention (server/metering.py decides when)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Engine, delete, func, insert, select, update
from sqlalchemy.orm import Session

from gpuplex.core.meter import SAMPLE_SOURCES, GpuSample, SampleSource
from gpuplex.errors import StoreError
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import GpuSamplePruningRow, GpuSampleRow

_PRUNING_ID = 1  # the pruning record's one row
ReplicaKey = tuple[str, str, int]  # tenant, workload, replica
ReplicaUsage = tuple[int, float | None]  # memory used (MiB), utilization (%)


class SampleRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def append(self, samples: Sequence[GpuSample]) -> int:
        """Store a batch in one transaction; returns how many were stored."""
        rows = [_row_values(sample) for sample in samples]
        if not rows:
            return 0
        with store_errors(self._engine), self._engine.begin() as connection:
            connection.execute(insert(GpuSampleRow), rows)
        return len(rows)

    def window(self, start: datetime, end: datetime, tenant: str | None = None) -> list[GpuSample]:
        """Samples taken in [start, end), of one tenant if given, oldest first."""
        query = (
            select(GpuSampleRow)
            .where(GpuSampleRow.at >= aware_utc(start), GpuSampleRow.at < aware_utc(end))
            .order_by(GpuSampleRow.at, GpuSampleRow.id)
        )
        if tenant is not None:
            query = query.where(GpuSampleRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_sample(row) for row in session.scalars(query)]

    def latest(self, tenant: str | None = None) -> tuple[datetime | None, list[GpuSample]]:
        """The newest sampling moment (of one tenant's replicas if given) and its samples, one
        per replica per GPU. (None, []) before any sample."""
        newest = select(func.max(GpuSampleRow.at))
        if tenant is not None:
            newest = newest.where(GpuSampleRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            sampled_at = session.scalars(newest).one()
            if sampled_at is None:
                return None, []
            query = select(GpuSampleRow).where(GpuSampleRow.at == sampled_at)
            if tenant is not None:
                query = query.where(GpuSampleRow.tenant == tenant)
            return sampled_at, [_sample(row) for row in session.scalars(query)]

    def latest_by_replica(
        self, tenant: str | None = None
    ) -> tuple[datetime | None, dict[ReplicaKey, ReplicaUsage]]:
        """The newest sampling moment (of one tenant's replicas if given) and what each replica
        held then: (tenant, workload, replica) -> (memory used in MiB, summed over its GPUs;
        utilization in %, averaged over those that report it). (None, {}) before any sample."""
        sampled_at, samples = self.latest(tenant)
        memory: dict[ReplicaKey, int] = {}
        utilization: dict[ReplicaKey, list[float]] = {}
        for sample in samples:
            key = (sample.tenant, sample.workload, sample.replica)
            memory[key] = memory.get(key, 0) + sample.memory_used_mib
            reported = utilization.setdefault(key, [])
            if sample.utilization_percent is not None:
                reported.append(sample.utilization_percent)
        latest = {
            key: (used, sum(utilization[key]) / len(utilization[key]) if utilization[key] else None)
            for key, used in memory.items()
        }
        return sampled_at, latest

    def delete_before(self, before: datetime) -> int:
        """Drop samples taken before `before` (once rolled up); returns how many went."""
        query = delete(GpuSampleRow).where(GpuSampleRow.at < aware_utc(before))
        with store_errors(self._engine), self._engine.begin() as connection:
            return connection.execute(query).rowcount

    def prune(self, windows_before: datetime, taken_before: datetime) -> int:
        """Drop the samples taken before `taken_before` and record that windows starting before
        `windows_before` can no longer be metered from samples, in one transaction (the record
        only moves forward); returns how many samples went."""
        row = GpuSamplePruningRow
        with store_errors(self._engine), self._engine.begin() as connection:
            recorded = connection.scalars(
                select(row.pruned_before).where(row.id == _PRUNING_ID)
            ).first()
            if recorded is None:
                connection.execute(insert(row).values(id=_PRUNING_ID, pruned_before=windows_before))
            elif aware_utc(windows_before) > aware_utc(recorded):
                connection.execute(
                    update(row).where(row.id == _PRUNING_ID).values(pruned_before=windows_before)
                )
            query = delete(GpuSampleRow).where(GpuSampleRow.at < aware_utc(taken_before))
            return connection.execute(query).rowcount

    def pruned_before(self) -> datetime | None:
        """Windows that start before this were pruned of their samples; None: never pruned."""
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(GpuSamplePruningRow, _PRUNING_ID)
            return aware_utc(row.pruned_before) if row is not None else None


def _source(value: str) -> SampleSource:
    for source in SAMPLE_SOURCES:
        if value == source:
            return source
    raise StoreError(f"a GPU sample has the unknown source {value!r}")


def _row_values(sample: GpuSample) -> dict[str, object]:
    """A sample as its gpu_samples row (every field but `gpu_model`, which metering fills in)."""
    return {
        "at": aware_utc(sample.at),
        "node": sample.node,
        "gpu_index": sample.gpu_index,
        "gpu_uuid": sample.gpu_uuid,
        "tenant": sample.tenant,
        "workload": sample.workload,
        "replica": sample.replica,
        "memory_used_mib": sample.memory_used_mib,
        "utilization_percent": sample.utilization_percent,
        "source": sample.source,
    }


def _sample(row: GpuSampleRow) -> GpuSample:
    return GpuSample(
        at=row.at,
        node=row.node,
        gpu_index=row.gpu_index,
        tenant=row.tenant,
        workload=row.workload,
        replica=row.replica,
        memory_used_mib=row.memory_used_mib,
        utilization_percent=row.utilization_percent,
        source=_source(row.source),
        gpu_uuid=row.gpu_uuid,
    )
