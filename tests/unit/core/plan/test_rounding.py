"""A memory request granted as a larger fixed size is recorded with what was asked and why."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.plan import RoundedUp, make_plan
from tests.unit.core.plan.factories import fleet, spec, tenant, workload

A100_80 = {"model": "A100-80GB", "count": 1}


def rounded(
    gpu: dict[str, Any], isolation: str, group: dict[str, Any] = A100_80
) -> RoundedUp | None:
    plan = make_plan(spec(fleet(group), tenant("t", workload("w", gpu), isolation=isolation)))
    [placement] = plan.placements
    return placement.rounded_up


def test_forty_gib_on_an_a100_80gb_is_rounded_up_past_the_39_5_gib_profiles() -> None:
    assert rounded({"memory_gib": 40}, "mig") == RoundedUp(
        requested_memory_mib=40960,
        granted="7g.80gb",
        granted_memory_mib=81152,  # 79.25 GiB, as nvidia-smi mig -lgip lists it
        smaller="4g.40gb",
        smaller_memory_mib=40448,  # 39.5 GiB
    )


def test_twenty_gib_skips_both_19_5_gib_profiles() -> None:
    assert rounded({"memory_gib": 20}, "mig") == RoundedUp(
        requested_memory_mib=20480,
        granted="3g.40gb",
        granted_memory_mib=40448,
        smaller="2g.20gb",
        smaller_memory_mib=19968,
    )


def test_a_request_of_exactly_the_profiles_memory_is_not_rounded() -> None:
    assert rounded({"memory_gib": 39.5}, "mig") is None


def test_compute_asked_is_recorded_with_the_profile_it_needed() -> None:
    found = rounded({"memory_gib": 8, "compute_percent": 40}, "mig")
    assert found is not None
    assert (found.requested_compute_percent, found.granted, found.smaller) == (
        40,
        "3g.40gb",
        "2g.20gb",
    )


def test_a_dedicated_memory_request_is_rounded_up_to_the_whole_gpu() -> None:
    assert rounded({"memory_gib": 30}, "dedicated") == RoundedUp(
        requested_memory_mib=30720, granted="whole GPU", granted_memory_mib=81920
    )


@pytest.mark.parametrize(
    ("gpu", "isolation"),
    [
        ({"mig_profile": "3g.40gb"}, "mig"),  # asked for exactly this profile
        ({"count": 1}, "dedicated"),  # asked for a whole GPU
        ({"memory_gib": 12}, "mps"),  # a share gets the memory asked
        ({"memory_gib": 12}, "timeslice"),
    ],
)
def test_explicit_sizes_and_shares_are_not_rounded(gpu: dict[str, Any], isolation: str) -> None:
    assert rounded(gpu, isolation) is None
