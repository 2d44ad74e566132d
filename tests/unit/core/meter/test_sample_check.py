"""Samples that cannot be true are refused per GPU and moment; the rest of the batch is kept."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, strategies as st

from gpuplex.core.meter import GpuSample
from gpuplex.core.meter.sample_check import within_capacity
from tests.unit.core.meter.plans import T0

CAPACITY = {("n", 0): 81920, ("n", 1): 81920}


def sample(memory_mib: int, gpu_index: int = 0, *, replica: int = 0, at_s: int = 0) -> GpuSample:
    return GpuSample(
        tenant="a",
        workload="w",
        replica=replica,
        node="n",
        gpu_index=gpu_index,
        at=T0 + timedelta(seconds=at_s),
        memory_used_mib=memory_mib,
        source="sim",
    )


def test_a_gpu_whose_samples_add_up_above_its_memory_is_refused_whole() -> None:
    # the report that started it: a 2-GPU replica's 112 GiB put on its first 80 GiB GPU
    wrong = sample(114688, 0)
    other = sample(1024, 0, replica=1)
    second_gpu = sample(0, 1)
    later = sample(40000, 0, at_s=5)
    checked = within_capacity([wrong, other, second_gpu, later], CAPACITY)
    assert checked.kept == [second_gpu, later]
    (refused,) = checked.refused
    assert (refused.node, refused.gpu_index, refused.used_mib) == ("n", 0, 115712)
    assert refused.samples == (wrong, other)
    assert checked.refused_samples == 2
    assert "115712 MiB on a 81920 MiB GPU" in refused.describe()
    assert "a/w#0 114688 MiB" in refused.describe()


def test_exactly_full_is_true_and_an_unknown_gpu_cannot_be_checked() -> None:
    full = [sample(40960, 0), sample(40960, 0, replica=1)]
    unknown = sample(10**7, 7)
    checked = within_capacity([*full, unknown], CAPACITY)
    assert checked.kept == [*full, unknown]
    assert checked.refused == []


@given(
    st.lists(st.tuples(st.integers(0, 1), st.integers(0, 90000), st.integers(0, 2)), max_size=12)
)
def test_kept_samples_never_add_up_above_capacity_and_none_is_lost(
    drawn: list[tuple[int, int, int]],
) -> None:
    batch = [sample(mib, gpu, at_s=at) for gpu, mib, at in drawn]
    checked = within_capacity(batch, CAPACITY)
    used: dict[tuple[int, int], int] = {}
    for kept in checked.kept:
        key = (kept.gpu_index, int(kept.at.timestamp()))
        used[key] = used.get(key, 0) + kept.memory_used_mib
    assert all(total <= 81920 for total in used.values())
    assert len(checked.kept) + checked.refused_samples == len(batch)
