"""The fair queue: weighted shares of token throughput, priorities, bounds, lift after idling."""

from __future__ import annotations

import heapq

import pytest

from gpuplex.core.serve.fair_queue import FairQueue, QueuedRequest


def jain_index(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def simulate(
    tenants: dict[str, tuple[int, list[int]]],
    slots: int,
    horizon_s: float,
    overflow: int = 0,
    free_tokens: int = 0,
) -> dict[str, float]:
    """Backlogged tenants (weight, request sizes cycled) on a backend with `slots` that serves
    100 tokens/s per slot, the first `free_tokens` of each request at no cost (a prompt read in a
    moment); returns tokens served per tenant by `horizon_s`."""
    queue = FairQueue(max_in_flight=slots, max_waiting_per_tenant=4, overflow=overflow)
    served = dict.fromkeys(tenants, 0.0)
    counters = dict.fromkeys(tenants, 0)
    running: list[tuple[float, int, QueuedRequest]] = []
    seq = 0

    def refill(tenant: str) -> None:
        nonlocal seq
        weight, sizes = tenants[tenant]
        while queue.waiting(tenant) < 4:
            size = sizes[counters[tenant] % len(sizes)]
            counters[tenant] += 1
            seq += 1
            assert queue.offer(QueuedRequest(f"{tenant}{seq}", tenant, size, weight))

    now = 0.0
    for tenant in tenants:
        refill(tenant)
    while now < horizon_s:
        while (request := queue.dispatch()) is not None:
            busy_s = max(request.cost_tokens - free_tokens, 1) / 100
            heapq.heappush(running, (now + busy_s, seq, request))
            seq += 1
        now, _, done = heapq.heappop(running)
        queue.finish(done, done.cost_tokens)
        served[done.tenant] += done.cost_tokens
        refill(done.tenant)
    return served


def test_equal_weights_give_equal_token_throughput_whatever_the_request_sizes() -> None:
    served = simulate(
        {"a": (1, [10, 500, 40]), "b": (1, [300]), "c": (1, [20, 20, 900])},
        slots=4,
        horizon_s=2000,
    )
    assert jain_index(list(served.values())) >= 0.99


@pytest.mark.parametrize("free_tokens", [0, 47])
def test_a_full_backend_with_an_overflow_slot_still_shares_tokens_not_slots(
    free_tokens: int,
) -> None:
    """As the gateway runs it (an overflow slot over 4): every freed slot of a full backend is an
    overflow one. Tokens stay shared even where short requests' tokens cost the server little."""
    served = simulate(
        {"a": (1, [free_tokens + 8]), "b": (1, [free_tokens + 30]), "c": (1, [free_tokens + 60])},
        slots=4,
        horizon_s=2000,
        overflow=1,
        free_tokens=free_tokens,
    )
    assert jain_index(list(served.values())) >= 0.99, served


def test_weights_1_2_4_give_shares_within_5_percent() -> None:
    served = simulate(
        {"a": (1, [100, 250]), "b": (2, [400, 50]), "c": (4, [120])}, slots=4, horizon_s=3000
    )
    total = sum(served.values())
    for tenant, weight in (("a", 1), ("b", 2), ("c", 4)):
        assert served[tenant] / total == pytest.approx(weight / 7, rel=0.05)


def test_higher_priority_goes_first() -> None:
    queue = FairQueue(max_in_flight=1, max_waiting_per_tenant=10)
    queue.offer(QueuedRequest("low", "a", 10, priority=0))
    queue.offer(QueuedRequest("high", "b", 10_000, priority=5))
    first = queue.dispatch()
    assert first is not None
    assert first.request_id == "high"


def test_full_queue_refuses_and_nothing_dispatches_past_the_slots() -> None:
    queue = FairQueue(max_in_flight=1, max_waiting_per_tenant=2)
    assert queue.offer(QueuedRequest("1", "a", 1))
    assert queue.offer(QueuedRequest("2", "a", 1))
    assert not queue.offer(QueuedRequest("3", "a", 1))
    assert queue.dispatch() is not None
    assert queue.dispatch() is None  # one slot, taken


def test_cancel_takes_a_waiting_request_back() -> None:
    queue = FairQueue(max_in_flight=1, max_waiting_per_tenant=2)
    request = QueuedRequest("1", "a", 1)
    queue.offer(request)
    assert queue.cancel(request)
    assert not queue.cancel(request)
    assert queue.dispatch() is None


def test_an_idle_tenant_banks_no_credit() -> None:
    queue = FairQueue(max_in_flight=1, max_waiting_per_tenant=100)
    for i in range(50):  # b is served alone for a long time
        queue.offer(QueuedRequest(f"b{i}", "b", 100))
        request = queue.dispatch()
        assert request is not None
        queue.finish(request, 100)
    for i in range(10):
        queue.offer(QueuedRequest(f"b-late{i}", "b", 100))
        queue.offer(QueuedRequest(f"a{i}", "a", 100))
    order = []
    for _ in range(10):
        request = queue.dispatch()
        assert request is not None
        order.append(request.tenant)
        queue.finish(request, 100)
    assert abs(order.count("a") - order.count("b")) <= 2  # a is lifted, does not get all 10


def test_a_newcomer_under_its_share_starts_at_once_in_an_overflow_slot() -> None:
    queue = FairQueue(max_in_flight=4, max_waiting_per_tenant=10, overflow=1)
    for i in range(6):
        queue.offer(QueuedRequest(f"b{i}", "b", 100))
    held = [queue.dispatch() for _ in range(5)]
    assert [r.tenant for r in held if r is not None] == ["b"] * 4  # b fills the bound, no more
    queue.offer(QueuedRequest("a0", "a", 100))
    newcomer = queue.dispatch()
    assert newcomer is not None
    assert newcomer.request_id == "a0"  # in the overflow slot, without waiting for b
    queue.offer(QueuedRequest("a1", "a", 100))
    assert queue.dispatch() is None  # overflow used up


def test_synchronised_long_requests_do_not_make_a_steady_tenant_wait() -> None:
    """b floods a 8-slot backend with 1 s requests that end together; a sends 2 per second."""
    queue = FairQueue(max_in_flight=8, max_waiting_per_tenant=32, overflow=2)
    events: list[tuple[float, int, str, QueuedRequest | None]] = []
    order = 0

    def push(at: float, kind: str, request: QueuedRequest | None = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, kind, request))

    for i in range(30):
        push(0.01 + i * 0.5, "a")
    for i in range(15 * 160):
        push(0.003 + i / 160, "b")
    arrived: dict[str, float] = {}
    waits: list[float] = []
    while events:
        now, n, kind, done = heapq.heappop(events)
        if kind == "done" and done is not None:
            queue.finish(done, 110)
        else:
            request = QueuedRequest(f"{kind}{n}", kind, 110)
            arrived[request.request_id] = now
            queue.offer(request)
        while (started := queue.dispatch()) is not None:
            if started.tenant == "a":
                waits.append(now - arrived[started.request_id])
            push(now + 1.0, "done", started)
    assert len(waits) == 30
    assert max(waits) < 0.01
