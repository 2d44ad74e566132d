"""Rate-limit math: sliding per-minute windows, reservations corrected by usage, leases."""

from __future__ import annotations

import gc
import math

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.serve.limits import (
    WINDOW_S,
    Admitted,
    Limit,
    LimiterState,
    LimitKind,
    Refused,
    SlidingWindow,
    admit,
    retry_after_header,
    scope_limits,
    settle,
)
from gpuplex.core.spec import RateLimits

TOKENS = Limit("tenant:a", LimitKind.TOKENS, 1000)
REQUESTS = Limit("tenant:a", LimitKind.REQUESTS, 3)
CONCURRENT = Limit("key:k", LimitKind.CONCURRENT, 2)


def test_tokens_are_reserved_so_concurrent_requests_cannot_overshoot() -> None:
    state = LimiterState()
    decisions = [admit(state, [TOKENS], f"r{i}", 300, now_s=0.0) for i in range(4)]
    assert [isinstance(d, Admitted) for d in decisions] == [True, True, True, False]


def test_settle_gives_back_what_was_not_used() -> None:
    state = LimiterState()
    for i in range(3):
        admit(state, [TOKENS], f"r{i}", 300, now_s=0.0)
    settle(state, [TOKENS], "r0", 50)
    assert isinstance(admit(state, [TOKENS], "r3", 300, now_s=1.0), Admitted)
    assert state.used(TOKENS, 1.0) == 50 + 300 + 300 + 300


def test_refusal_says_when_the_oldest_entries_leave_the_window() -> None:
    state = LimiterState()
    admit(state, [TOKENS], "r0", 600, now_s=10.0)
    admit(state, [TOKENS], "r1", 300, now_s=20.0)
    refused = admit(state, [TOKENS], "r2", 500, now_s=30.0)
    assert isinstance(refused, Refused)
    assert refused.limit == TOKENS
    assert refused.retry_after_s == 10.0 + WINDOW_S - 30.0  # r0 leaving frees enough
    assert retry_after_header(refused) == "40"
    assert isinstance(admit(state, [TOKENS], "r2", 500, now_s=70.0), Admitted)


def test_a_request_bigger_than_the_limit_is_never_admitted() -> None:
    refused = admit(LimiterState(), [TOKENS], "big", 1001, now_s=0.0)
    assert isinstance(refused, Refused)
    assert refused.never
    assert math.isinf(refused.retry_after_s)


def test_all_limits_or_none() -> None:
    state = LimiterState()
    for i in range(3):
        assert isinstance(admit(state, [REQUESTS, TOKENS], f"r{i}", 10, now_s=0.0), Admitted)
    refused = admit(state, [REQUESTS, TOKENS], "r3", 10, now_s=0.0)
    assert isinstance(refused, Refused)
    assert refused.limit == REQUESTS
    assert state.used(TOKENS, 0.0) == 30  # the refused request took nothing from TOKENS


def test_concurrency_slots_free_on_settle_or_when_the_lease_ends() -> None:
    state = LimiterState()
    assert isinstance(admit(state, [CONCURRENT], "a", 1, 0.0, lease_s=5.0), Admitted)
    assert isinstance(admit(state, [CONCURRENT], "b", 1, 0.0, lease_s=5.0), Admitted)
    assert isinstance(admit(state, [CONCURRENT], "c", 1, 1.0, lease_s=5.0), Refused)
    settle(state, [CONCURRENT], "a", 0)
    assert isinstance(admit(state, [CONCURRENT], "c", 1, 1.0, lease_s=5.0), Admitted)
    assert isinstance(admit(state, [CONCURRENT], "d", 1, 6.0, lease_s=5.0), Admitted)  # b expired


def test_prune_forgets_idle_windows() -> None:
    state = LimiterState()
    admit(state, [TOKENS, CONCURRENT], "a", 10, 0.0, lease_s=1.0)
    state.prune(WINDOW_S + 1)
    assert not state.windows
    assert not state.leases


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=5, allow_nan=False),  # gap to the previous request
            st.integers(min_value=1, max_value=400),  # reservation
            st.integers(min_value=0, max_value=400),  # actual use
        ),
        max_size=80,
    )
)
def test_no_window_of_60_s_admits_more_than_the_limit(
    requests: list[tuple[float, int, int]],
) -> None:
    state = LimiterState()
    now = 0.0
    charged: list[tuple[float, int]] = []  # (admitted at, tokens finally charged)
    for i, (gap, reserve, used) in enumerate(requests):
        now += gap
        if isinstance(admit(state, [TOKENS], f"r{i}", reserve, now), Admitted):
            final = min(used, reserve)
            settle(state, [TOKENS], f"r{i}", final)
            charged.append((now, final))
    for start, _ in charged:
        in_window = sum(t for at, t in charged if start <= at < start + WINDOW_S)
        assert in_window <= TOKENS.amount


# A window as a plain list of (at_s, request_id, amount): the model the columnar window must match.
_Model = list[tuple[float, str, int]]

_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "correct", "expire"]),
        st.floats(min_value=0.0, max_value=20.0),  # seconds since the previous step
        st.integers(min_value=0, max_value=40),  # which request (correct) or amount (add)
    ),
    max_size=120,
)


@given(_steps)
@settings(max_examples=300, deadline=None)
def test_the_window_agrees_with_a_plain_list_through_adds_corrections_and_cuts(
    steps: list[tuple[str, float, int]],
) -> None:
    window, model, now, added = SlidingWindow(), _Model(), 0.0, 0
    for op, gap_s, number in steps:
        now += gap_s
        if op == "add":
            window.add(now, f"r{added}", number)
            model.append((now, f"r{added}", number))
            added += 1
        elif op == "correct" and model:
            _, target, _ = model[number % len(model)]  # a live request, old or new
            window.correct(target, number + 1)
            model = [(at, r, number + 1 if r == target else n) for at, r, n in model]
        elif op == "expire":
            window.expire(now)
            model = [e for e in model if e[0] > now - WINDOW_S]
            assert len(window) == len(model)
            assert window.head <= len(window.at_s) // 2 + 1  # the expired prefix is cut off
        assert window.total == sum(n for _, _, n in model)


def test_a_full_window_gives_the_garbage_collector_nothing_to_walk() -> None:
    state = LimiterState()
    for i in range(10_000):
        admit(state, [TOKENS_BIG, REQUESTS_BIG], f"req-{i}", 10, now_s=i * 0.001)
    for limit in (TOKENS_BIG, REQUESTS_BIG):
        window = state.window(limit)
        assert len(window) == 10_000
        assert not gc.is_tracked(window.position)
        tracked = [
            x for x in (*window.at_s, *window.amounts, *window.request_ids) if gc.is_tracked(x)
        ]
        assert tracked == []


TOKENS_BIG = Limit("tenant:big", LimitKind.TOKENS, 10**9)
REQUESTS_BIG = Limit("tenant:big", LimitKind.REQUESTS, 10**9)


@pytest.mark.parametrize(
    ("rpm", "tpm", "concurrent", "kinds"),
    [
        (None, None, None, []),
        (60, None, None, [LimitKind.REQUESTS]),
        (None, 1000, 4, [LimitKind.TOKENS, LimitKind.CONCURRENT]),
        (60, 1000, 4, [LimitKind.REQUESTS, LimitKind.TOKENS, LimitKind.CONCURRENT]),
    ],
)
def test_a_scope_sets_only_the_limits_it_names(
    rpm: int | None, tpm: int | None, concurrent: int | None, kinds: list[LimitKind]
) -> None:
    limits = scope_limits(
        "key:abcd1234",
        RateLimits(requests_per_min=rpm, tokens_per_min=tpm, concurrent_requests=concurrent),
    )
    assert [limit.kind for limit in limits] == kinds
    assert {limit.scope for limit in limits} <= {"key:abcd1234"}
    amounts = {LimitKind.REQUESTS: rpm, LimitKind.TOKENS: tpm, LimitKind.CONCURRENT: concurrent}
    assert all(limit.amount == amounts[limit.kind] for limit in limits)
