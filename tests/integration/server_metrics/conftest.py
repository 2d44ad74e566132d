"""The control plane with a real store (SQLite, and PostgreSQL where a test asks for `engine`), the
example SaaS spec applied, GPU samples and gateway usage stored and rolled up; scraped through
FastAPI's TestClient from an address of the test's choosing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine

from gpuplex.core.meter import GpuSample
from gpuplex.core.plan import Placement
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.revision import AppliedRevision
from gpuplex.server.app import create_app
from gpuplex.server.context import ServerContext
from gpuplex.server.metrics.collector import SPEND_THREAD
from gpuplex.server.metrics.endpoint import LOOPBACK_NETWORKS
from gpuplex.server.spec_apply import apply
from gpuplex.store.db import open_store
from tests.clocks import ManualClock
from tests.integration.store.conftest import (  # noqa: F401 (fixtures)
    StoreTemplates,
    new_sqlite_store,
    postgres_dsn,
    store_templates,
    store_url,
)

EXAMPLE = Path(__file__).parents[3] / "examples" / "saas-single-server.yaml"
APPLIED_AT = datetime(2025, 3, 10, 10, 0, tzinfo=UTC)
NOW = APPLIED_AT + timedelta(hours=2)
LOOPBACK = "127.0.0.1"

SeriesKey = tuple[str, frozenset[tuple[str, str]]]


@dataclass(frozen=True)
class Scrape:
    text: str
    series: dict[SeriesKey, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Scrape:
        series = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        return cls(text, series)

    def value(self, name: str, **labels: str) -> float:
        return self.series[name, frozenset(labels.items())]

    def has(self, name: str, **labels: str) -> bool:
        return (name, frozenset(labels.items())) in self.series

    def names(self) -> set[str]:
        return {name for name, _ in self.series}

    def label_values(self, name: str, label: str) -> set[str]:
        return {dict(labels)[label] for n, labels in self.series if n == name}


@dataclass
class Stack:
    ctx: ServerContext
    clock: ManualClock

    @property
    def applied(self) -> AppliedRevision:
        applied = self.ctx.current.get()
        assert applied is not None
        return applied

    def placements(self, tenant: str) -> list[Placement]:
        return [p for p in self.applied.plan.placements if p.tenant == tenant]

    def client(
        self, address: str = LOOPBACK, metrics_from: Sequence[str] = LOOPBACK_NETWORKS
    ) -> TestClient:
        return TestClient(create_app(self.ctx, metrics_from), client=(address, 50_000))

    def scrape(self, client: TestClient | None = None) -> Scrape:
        reply = (client or self.client()).get("/metrics")
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
        return Scrape.parse(reply.text)


def sample(placement: Placement, at: datetime, memory_mib: int, busy: float | None) -> GpuSample:
    return GpuSample(
        at=at,
        node=placement.node,
        gpu_index=placement.gpu_indices[0],
        tenant=placement.tenant,
        workload=placement.workload,
        replica=placement.replica,
        memory_used_mib=memory_mib,
        utilization_percent=busy,
        source="sim",
        gpu_uuid=f"GPU-{placement.node}-{placement.gpu_indices[0]}",
    )


def record(
    n: int, tenant: str, model: str, status: int, prompt: int, completion: int
) -> UsageRecord:
    return UsageRecord(
        request_id=f"req-{n}",
        tenant=tenant,
        key_prefix="gpx_abcd1234",
        model=model,
        endpoint="chat.completions",
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_s=0.5,
        started_at=APPLIED_AT + timedelta(minutes=10 + n),
    )


#: What the stack's gateway served: northwind 3 requests of its chat model (one failed) and one of
#: a model it does not serve; hobbyists 2 of its playground.
RECORDS = [
    record(1, "northwind", "northwind-chat", 200, 100, 50),
    record(2, "northwind", "northwind-chat", 200, 200, 80),
    record(3, "northwind", "northwind-chat", 500, 10, 0),
    record(4, "northwind", "no-such-model-7", 404, 5, 0),
    record(5, "hobbyists", "playground-8b", 200, 30, 20),
    record(6, "hobbyists", "playground-8b", 200, 30, 25),
]


def build_stack(engine: Engine, spec_text: str | None = None) -> Stack:
    """The spec applied at APPLIED_AT; samples every minute for two hours of northwind's chat
    replica (60000 MiB, 40 % busy) and hobbyists' replica 0 (9000 MiB, no utilization); the
    gateway records above; every window rolled up to NOW, where the clock then stands."""
    clock = ManualClock(APPLIED_AT)
    ctx = ServerContext.open(engine, clock)
    apply(
        ctx.spec_history,
        spec_text if spec_text is not None else EXAMPLE.read_text(),
        0,
        actor="test",
    )
    stack = Stack(ctx, clock)
    if spec_text is None:
        chat = next(p for p in stack.placements("northwind") if p.workload == "chat-70b")
        playground = next(p for p in stack.placements("hobbyists") if p.replica == 0)
        minutes = [APPLIED_AT + timedelta(minutes=m) for m in range(120)]
        ctx.samples.append([sample(chat, at, 60_000, 40.0) for at in minutes])
        ctx.samples.append([sample(playground, at, 9_000, None) for at in minutes])
        ctx.usage.insert_many(RECORDS)
    clock.at = NOW
    ctx.metering.roll_up_range(APPLIED_AT, NOW)
    return stack


def finish_spend_refreshes() -> None:
    """Wait for /metrics' background spend computations, which use the store being closed."""
    for thread in threading.enumerate():
        if thread.name == SPEND_THREAD:
            thread.join(timeout=30)


@pytest.fixture
def sqlite_engine(
    tmp_path: Path,
    new_sqlite_store: Callable[[Path], Engine],  # noqa: F811 - the imported fixture
) -> Iterator[Engine]:
    opened = new_sqlite_store(tmp_path / "gpuplex.db")
    try:
        yield opened
    finally:
        finish_spend_refreshes()
        opened.dispose()


@pytest.fixture  # store_url and store_templates are the imported fixtures
def engine(store_url: str, store_templates: StoreTemplates) -> Iterator[Engine]:  # noqa: F811
    store_templates.fill(store_url)
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        finish_spend_refreshes()
        opened.dispose()


@pytest.fixture
def stack(sqlite_engine: Engine) -> Stack:
    return build_stack(sqlite_engine)
