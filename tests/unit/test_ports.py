"""The suite's ports (tests/ports.py): outside the kernel's ephemeral range, a slice of their own
per pytest-xdist worker, never one something is bound to."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tests.ports import (
    DEFAULT_EPHEMERAL,
    PortSource,
    ephemeral_range,
    free_port,
    free_port_block,
    port_pool,
    worker_slice,
)

WORKERS = [None, *(f"gw{n}" for n in range(8))]


@pytest.mark.parametrize("ephemeral", [DEFAULT_EPHEMERAL, (1024, 40000), (49152, 65535)])
def test_the_pool_is_outside_the_ephemeral_range_and_above_1023(
    ephemeral: tuple[int, int],
) -> None:
    pool = port_pool(ephemeral)
    low, high = ephemeral
    assert len(pool) >= 4096
    assert pool.start >= 1024
    assert pool.stop <= low or pool.start > high


def test_the_default_pool_is_20000_to_32767() -> None:
    assert port_pool(DEFAULT_EPHEMERAL) == range(20000, 32768)


def test_the_ephemeral_range_is_read_from_the_kernel_or_linuxs_default(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("10000\t20000\n")
    assert ephemeral_range(tmp_path / "range") == (10000, 20000)
    assert ephemeral_range(tmp_path / "absent") == DEFAULT_EPHEMERAL


@pytest.mark.parametrize("workers", [0, 4, 8, 12])
def test_two_workers_slices_never_overlap(workers: int) -> None:
    pool = port_pool(DEFAULT_EPHEMERAL)
    names = [None, *(f"gw{n}" for n in range(max(workers, 1)))]
    slices = [worker_slice(name, workers, pool) for name in names]
    for one, other in itertools.combinations(slices, 2):
        assert not set(one) & set(other)
    assert all(len(part) >= 500 and part.start >= pool.start for part in slices)
    assert all(part.stop <= pool.stop for part in slices)


def test_ports_from_two_workers_never_overlap() -> None:
    pool = port_pool(DEFAULT_EPHEMERAL)
    sources = [PortSource(worker_slice(name, 4, pool)) for name in WORKERS]
    drawn = [{source.block(1) for _ in range(50)} for source in sources]
    for one, other in itertools.combinations(drawn, 2):
        assert not one & other


def test_ports_go_round_without_repeating_until_the_slice_is_used_up() -> None:
    base = free_port_block(5)
    source = PortSource(range(base, base + 5))
    first = [source.block(1) for _ in range(5)]
    assert sorted(first) == list(range(base, base + 5))
    assert [source.block(1) for _ in range(5)] == first


def test_a_port_something_listens_on_is_never_handed_out() -> None:
    base = free_port_block(3)
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 1))
        held.listen()
        source = PortSource(range(base, base + 3))
        drawn = {source.block(1) for _ in range(12)}
    assert drawn == {base, base + 2}


def test_a_block_skips_a_port_in_use_and_fails_when_there_is_no_room() -> None:
    base = free_port_block(4)
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 1))
        source = PortSource(range(base, base + 4))
        assert source.block(2) == base + 2
        with pytest.raises(RuntimeError, match="no 3 free consecutive ports"):
            source.block(3)


def test_this_processs_ports_are_outside_the_ephemeral_range_and_free() -> None:
    low, high = ephemeral_range()
    for port in (free_port() for _ in range(20)):
        assert not low <= port <= high
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
