"""Gateway metering: requests and tokens per tenant and model, by start time in [start, end)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import MeterLine, MeterWindow, gateway_lines
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.errors import MeterInputError
from tests.unit.core.meter.plans import T0

WINDOW = MeterWindow(T0, T0 + timedelta(hours=1))


def record(
    at_s: float,
    *,
    tenant: str = "a",
    model: str = "chat",
    status: int = 200,
    prompt: int = 100,
    completion: int = 10,
) -> UsageRecord:
    return UsageRecord(
        request_id=f"{tenant}-{at_s}-{model}-{status}-{prompt}-{completion}",
        tenant=tenant,
        key_prefix="k",
        model=model,
        endpoint="chat.completions",
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_s=0.1,
        started_at=T0 + timedelta(seconds=at_s),
    )


def test_requests_and_tokens_per_model_within_the_window() -> None:
    records = [
        record(0),  # the first instant belongs to the window
        record(10, status=429, prompt=0, completion=0),
        record(20, model="embed", prompt=7, completion=0),
        record(3600),  # the end belongs to the next window
        record(-1),
        record(5, tenant="b"),
    ]
    got = {
        (line.tenant, line.metric, line.dimension): line.quantity
        for line in gateway_lines(records, WINDOW)
    }
    assert got == {
        ("a", "requests", "chat"): 2,
        ("a", "failed_requests", "chat"): 1,
        ("a", "prompt_tokens", "chat"): 100,
        ("a", "completion_tokens", "chat"): 10,
        ("a", "requests", "embed"): 1,
        ("a", "prompt_tokens", "embed"): 7,
        ("b", "requests", "chat"): 1,
        ("b", "prompt_tokens", "chat"): 100,
        ("b", "completion_tokens", "chat"): 10,
    }


def test_no_records_meter_nothing_and_naive_times_are_refused() -> None:
    assert gateway_lines([], WINDOW) == []
    naive = record(0)
    naive = UsageRecord(**{**naive.fields(), "started_at": datetime(2025, 3, 1)})  # noqa: DTZ001
    with pytest.raises(MeterInputError):
        gateway_lines([naive], WINDOW)


@given(
    st.lists(
        st.builds(
            record,
            at_s=st.integers(-10, 3610).map(float),
            tenant=st.sampled_from(["a", "b"]),
            model=st.sampled_from(["chat", "embed"]),
            status=st.sampled_from([200, 429, 500]),
            prompt=st.integers(0, 10_000),
        ),
        max_size=30,
    ),
    st.integers(1, 3599),
)
def test_adjacent_windows_add_up(records: list[UsageRecord], split_s: int) -> None:
    split = T0 + timedelta(seconds=split_s)
    totals: Counter[tuple[str, str, str]] = Counter()
    for window in (MeterWindow(T0, split), MeterWindow(split, WINDOW.end)):
        for line in gateway_lines(records, window):
            totals[line.tenant, line.metric, line.dimension] += int(line.quantity)
    union = gateway_lines(records, WINDOW)
    assert totals == Counter(
        {(line.tenant, line.metric, line.dimension): int(line.quantity) for line in union}
    )
    inside = [r for r in records if WINDOW.contains(r.started_at)]
    requests = sum(line.quantity for line in union if line.metric == "requests")
    assert requests == len(inside)
    assert gateway_lines(list(reversed(records)), WINDOW) == union == sorted(union)
    assert all(isinstance(line, MeterLine) and line.quantity > 0 for line in union)
    assert all(isinstance(line.quantity, Decimal) for line in union)
