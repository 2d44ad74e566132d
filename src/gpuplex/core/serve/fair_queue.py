"""Weighted fair queueing on tokens in front of one backend: per-tenant FIFO queues, a bound on
requests in flight towards the model server, and virtual token counters (VTC, Sheng et al., OSDI
2024) that decide whose request goes next.

- Each tenant has a counter of the tokens it was served, divided by its weight. The next request
  comes from the backlogged tenant with the smallest counter, so backlogged tenants get token
  throughput in proportion to their weights whatever their request sizes.
- A request is charged its reservation (prompt estimate + `max_tokens`) when it is dispatched and
  corrected to its real usage when it finishes.
- A tenant whose queue was empty is lifted to the current virtual time (the smallest counter among
  the backlogged tenants, else the last dispatched counter): idle time does not bank credit that
  would later starve the others.
- Priorities are strict bands: a backlogged higher-priority tenant always goes first; fairness is
  kept among tenants of the same priority.
- Slots are not preempted, so a tenant that arrives while another holds every slot would wait for
  one to finish (up to a whole request, and with requests of equal length finishing together, that
  wait does not average out). A few overflow slots above the bound go to tenants holding less than
  their weighted share of the slots, no more than one request ahead of the turn: a newcomer starts
  at once, the busy tenant keeps its slots, and the backend sees a batch a little larger than the
  bound.
- Each tenant's queue has a length bound: a full queue refuses at once. Wait timeouts belong to the
  caller, which `cancel`s what it gave up on.

The state is plain data; the gateway's queue runtime wraps it with futures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    request_id: str
    tenant: str
    cost_tokens: int
    weight: int = 1
    priority: int = 0


@dataclass(slots=True)
class _Tenant:
    counter: float = 0.0
    waiting: deque[QueuedRequest] = field(default_factory=deque)
    weight: int = 1
    priority: int = 0
    in_flight: int = 0


@dataclass(slots=True)
class FairQueue:
    max_in_flight: int
    max_waiting_per_tenant: int
    overflow: int = 0  # slots above max_in_flight, for tenants under their share
    in_flight: int = 0
    virtual_time: float = 0.0
    tenants: dict[str, _Tenant] = field(default_factory=dict)
    waiting_count: int = 0

    def offer(self, request: QueuedRequest) -> bool:
        """Queue a request; False if its tenant's queue is full. Call `dispatch` afterwards."""
        tenant = self.tenants.get(request.tenant)
        if tenant is None:
            tenant = self.tenants[request.tenant] = _Tenant()
        if len(tenant.waiting) >= self.max_waiting_per_tenant:
            return False
        if not tenant.waiting:
            tenant.counter = max(tenant.counter, self._current_virtual_time())
        tenant.weight = request.weight
        tenant.priority = request.priority
        tenant.waiting.append(request)
        self.waiting_count += 1
        return True

    def dispatch(self) -> QueuedRequest | None:
        """The next request to send to the backend, if a slot is free and anyone waits: whose turn
        it is decides the counters. An overflow slot goes to a tenant holding less than its share
        of the slots, and only if that leaves it at most one request ahead of the turn: were it
        given to any tenant under its share, a full backend (where every freed slot is an overflow
        one) would share its slots by count and not its tokens, and a tenant of short requests
        would get several times the tokens of one of long requests."""
        if self.waiting_count == 0 or self.in_flight >= self.max_in_flight + self.overflow:
            return None
        turn = self._turn(self.tenants.items())
        if turn is None:
            return None
        chosen = turn
        if self.in_flight >= self.max_in_flight:
            shares = self._slot_shares()
            under = [(n, t) for n, t in self.tenants.items() if t.in_flight < shares.get(n, 0)]
            overflow = self._turn(under)
            if overflow is None or overflow.priority < turn.priority:
                return None
            if overflow.counter - turn.counter > overflow.waiting[0].cost_tokens / overflow.weight:
                return None  # more than one request ahead of the turn
            chosen = overflow
        request = chosen.waiting.popleft()
        self.waiting_count -= 1
        self.in_flight += 1
        chosen.in_flight += 1
        self.virtual_time = chosen.counter
        chosen.counter += request.cost_tokens / chosen.weight
        return request

    @staticmethod
    def _turn(tenants: Iterable[tuple[str, _Tenant]]) -> _Tenant | None:
        """The waiting tenant whose turn it is: the highest priority, then the smallest counter."""
        chosen: _Tenant | None = None
        for _, tenant in tenants:
            if tenant.waiting and (
                chosen is None
                or tenant.priority > chosen.priority
                or (tenant.priority == chosen.priority and tenant.counter < chosen.counter)
            ):
                chosen = tenant
        return chosen

    def finish(self, request: QueuedRequest, used_tokens: int) -> None:
        """A dispatched request is over: free its slot, correct its charge to what it used."""
        self.in_flight -= 1
        tenant = self.tenants.get(request.tenant)
        if tenant is not None:
            tenant.in_flight -= 1
            tenant.counter += (used_tokens - request.cost_tokens) / tenant.weight

    def cancel(self, request: QueuedRequest) -> bool:
        """Take back a request that is still waiting (its wait timed out or its client left)."""
        tenant = self.tenants.get(request.tenant)
        if tenant is None:
            return False
        try:
            tenant.waiting.remove(request)
        except ValueError:
            return False
        self.waiting_count -= 1
        return True

    def waiting(self, tenant: str) -> int:
        found = self.tenants.get(tenant)
        return len(found.waiting) if found else 0

    def _slot_shares(self) -> dict[str, float]:
        """Each active tenant's weighted share of the slots."""
        active = {n: t for n, t in self.tenants.items() if t.waiting or t.in_flight}
        total = sum(t.weight for t in active.values()) or 1
        return {n: self.max_in_flight * t.weight / total for n, t in active.items()}

    def _current_virtual_time(self) -> float:
        backlogged = [t.counter for t in self.tenants.values() if t.waiting]
        return min(backlogged) if backlogged else self.virtual_time
