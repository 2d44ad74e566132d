"""The VRAM watchdog's rule: only time-sliced shares are policed, at planned + tolerance."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import example, given, strategies as st

from gpuplex.core.apply.actions import VramStop
from gpuplex.core.apply.watchdog import memory_limit_mib, vram_violation
from gpuplex.core.plan.model import Mode
from tests.unit.core.apply.factories import binding, mig_slice, record, wanted


@pytest.mark.parametrize(
    ("mode", "memory_mib", "tolerance", "limit"),
    [
        (Mode.TIMESLICE, 10_000, 10, 11_000),
        (Mode.TIMESLICE, 10_000, 0, 10_000),
        (Mode.TIMESLICE, 8_191, 10, 9_010),  # 819.1 rounds down
        (Mode.TIMESLICE, 4_096, 100, 8_192),
        (Mode.DEDICATED, 10_000, 10, None),
        (Mode.MPS, 10_000, 10, None),
        (Mode.MIG, 9_984, 10, None),
    ],
)
def test_only_timeslice_bindings_have_a_limit(
    mode: Mode, memory_mib: int, tolerance: int, limit: int | None
) -> None:
    mig = mig_slice("1g.10gb", 0) if mode is Mode.MIG else None
    assert memory_limit_mib(binding(mode, 0, mig=mig, memory_mib=memory_mib), tolerance) == limit


def test_exactly_at_the_limit_is_fine_one_mib_over_is_stopped() -> None:
    share = record(wanted("chat", binding(Mode.TIMESLICE, 2, memory_mib=20_000), tenant="globex"))
    assert vram_violation(share, 22_000, 10) is None
    assert vram_violation(share, 0, 10) is None
    stop = vram_violation(share, 22_001, 10)
    assert stop == VramStop(
        label="globex/chat#0",
        tenant="globex",
        workload="chat",
        planned_mib=20_000,
        observed_mib=22_001,
        limit_mib=22_000,
    )


@given(
    mode=st.sampled_from(list(Mode)),
    memory_mib=st.integers(1, 200_000),
    tolerance=st.integers(0, 100),
    observed=st.integers(0, 500_000),
)
@example(
    mode=Mode.TIMESLICE, memory_mib=1, tolerance=1, observed=2
)  # limit 1.01 MiB rounds down to 1
def test_violation_iff_a_timeslice_share_exceeds_planned_plus_tolerance(
    mode: Mode, memory_mib: int, tolerance: int, observed: int
) -> None:
    mig = mig_slice("1g.10gb", 0) if mode is Mode.MIG else None
    share = record(wanted("w", binding(mode, 0, mig=mig, memory_mib=memory_mib)))
    stop = vram_violation(share, observed, tolerance)
    over = observed > math.floor(
        Fraction(memory_mib * (100 + tolerance), 100)
    )  # over the limit, in whole MiB
    assert (stop is not None) == (mode is Mode.TIMESLICE and over)
    if stop is not None:
        assert (stop.planned_mib, stop.observed_mib) == (memory_mib, observed)
        assert stop.limit_mib < observed
