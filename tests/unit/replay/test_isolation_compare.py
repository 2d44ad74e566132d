"""Comparing isolation modes: each mode's reservation of a share, MIG's placement rules, the tallies
on hand-computed tiny traces, the same pod sequence as `replay`; the order of the modes on openb."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.replay.isolation_compare import (
    CSV_HEADER,
    MODES,
    IsolationMode,
    MigRules,
    ModeResult,
    MpsRules,
    TimeSliceRules,
    compare_mode,
    csv_text,
    mig_table,
    summarise,
    vs_dedicated,
)
from gpuplex.replay.openb import load_nodes, load_pods
from gpuplex.replay.placement import replay

OPENB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "openb"
D, MIG, MPS, TS = MODES


def pod(name: str, milli: int, num_gpu: int = 1, cpu: int = 1_000) -> TracePod:
    return TracePod(name, cpu, 1024, num_gpu, milli)


def node(gpus: int, name: str = "n") -> TraceNode:
    return TraceNode(name, 128_000, 1 << 20, gpus, "A10")


def run(
    nodes: list[TraceNode],
    pods: list[TracePod],
    mode: IsolationMode,
    inflate: float,
    replicas: int = 4,
) -> ModeResult:
    return compare_mode(nodes, pods, mode, seed=3, inflate=inflate, time_slice_replicas=replicas)


# -- reservations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "profile", "compute", "memory"),
    [
        (50, "1g.5gb", 1000 / 7, 125),
        (125, "1g.5gb", 1000 / 7, 125),
        (126, "1g.10gb", 1000 / 7, 250),  # 1/8 of the memory is too little
        (142, "1g.10gb", 1000 / 7, 250),
        (143, "2g.10gb", 2000 / 7, 250),  # more than 1/7 of the compute
        (240, "2g.10gb", 2000 / 7, 250),
        (260, "3g.20gb", 3000 / 7, 500),  # 2g's compute (285) would do, not its memory (250)
        (300, "3g.20gb", 3000 / 7, 500),
        (460, "4g.20gb", 4000 / 7, 500),
        (500, "4g.20gb", 4000 / 7, 500),
        (501, "whole GPU", 1000, 1000),  # 4g.20gb holds half the memory: a 7g, the whole GPU
        (810, "whole GPU", 1000, 1000),
    ],
)
def test_mig_takes_the_smallest_profile_holding_the_share_on_compute_and_memory(
    share: int, profile: str, compute: float, memory: float
) -> None:
    reservation = MigRules((1, 1)).reserve(share)
    assert reservation.label == profile
    assert reservation.compute_milli == pytest.approx(compute)
    assert reservation.memory_milli == memory
    assert reservation.state_milli == int(compute)  # sevenths, rounded down: 7 x 1g fit in 1000


@pytest.mark.parametrize(
    ("share", "milli", "label"),
    [(300, 300, "30 %"), (301, 310, "31 %"), (459, 460, "46 %"), (995, 1000, "whole GPU")],
)
def test_mps_rounds_up_to_a_whole_percent_of_compute_and_memory(
    share: int, milli: int, label: str
) -> None:
    reservation = MpsRules((1, 1)).reserve(share)
    assert (reservation.state_milli, reservation.label) == (milli, label)
    assert reservation.memory_milli == milli


@pytest.mark.parametrize(
    ("replicas", "share", "k", "compute"),
    [(4, 240, 1, 250), (4, 250, 1, 250), (4, 300, 2, 500), (4, 460, 2, 500), (4, 650, 3, 750)],
)
def test_time_slicing_takes_whole_replicas_and_reserves_no_memory(
    replicas: int, share: int, k: int, compute: float
) -> None:
    reservation = TimeSliceRules((1, 1), replicas).reserve(share)
    assert (reservation.unit, reservation.compute_milli) == (k, compute)
    assert reservation.memory_milli == share  # no memory is set apart: none stranded


def test_time_slicing_all_replicas_is_the_whole_gpu_and_three_replicas_round_down() -> None:
    assert TimeSliceRules((1, 1), 4).reserve(810).whole
    third = TimeSliceRules((1, 1), 3).reserve(300)
    assert third.state_milli == 333
    assert third.compute_milli == pytest.approx(1000 / 3)
    with pytest.raises(ValueError, match="at least 2 replicas"):
        TimeSliceRules((1, 1), 1)


# -- MIG placement rules ------------------------------------------------------------------------


def add(layout: int, *profiles: str) -> int:
    """The layout after adding the profiles in order; -1 as soon as one does not fit."""
    table = mig_table()
    names = [p.name for p in table.profiles]
    for name in profiles:
        layout = int(table.next_layout[layout, names.index(name)])
        if layout < 0:
            return -1
    return layout


def test_mig_layouts_follow_the_placement_rules() -> None:
    assert [p.name for p in mig_table().profiles] == [
        "1g.5gb",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
    ]
    assert add(0, *["1g.5gb"] * 7) >= 0
    assert add(0, *["1g.5gb"] * 8) == -1  # memory slot 7 is no start for a 1g
    assert add(0, *["1g.10gb"] * 4) >= 0
    assert add(0, *["1g.10gb"] * 4, "1g.5gb") == -1
    assert add(0, "3g.20gb", "4g.20gb") >= 0  # the 3g goes to slot 4, keeping 4g's slot 0
    assert add(0, "4g.20gb", "3g.20gb") >= 0
    assert add(0, "3g.20gb", "3g.20gb") >= 0
    assert add(0, "3g.20gb", "3g.20gb", "1g.5gb") == -1  # 6 compute slices, but no memory left
    assert add(0, "2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb") >= 0  # 2g at 0, 2, 4; 1g at 6
    assert add(0, "2g.10gb", "2g.10gb", "2g.10gb", "2g.10gb") == -1  # a 2g never starts at 6
    assert add(0, "4g.20gb", "2g.10gb", "2g.10gb") == -1  # 8 compute slices
    assert add(0, "4g.20gb", "1g.5gb", "1g.5gb", "1g.5gb") >= 0


def test_a_mig_instance_leaves_a_gpu_with_room_but_no_valid_placement() -> None:
    # two 3g on a GPU leave 144 milli (a seventh) free but no memory slot: the 1g goes elsewhere
    pods = [pod("a", 300), pod("b", 300), pod("c", 300), pod("d", 100)]
    for seed in range(6):
        end = compare_mode([node(2)], pods, MIG, seed=seed, inflate=0.5).at_end
        assert (end.gpus_in_use, end.failed_pods) == (2, 0)
        assert end.reserved_milli == pytest.approx(10_000 / 7)


# -- tiny traces, by hand -----------------------------------------------------------------------

#: one node of 8 GPUs; 300 + 460 + 240 + 1000 = 2000 milli, a quarter of it: no inflation
SHARES = [pod("a", 300), pod("b", 460), pod("c", 240), pod("d", 1000)]


@pytest.mark.parametrize(
    ("mode", "in_use", "reserved", "stranded"),
    [
        # every share a whole GPU; memory set apart: 700 + 540 + 760
        (D, 4, 4000, 2000),
        # 3g (3/7) + 4g (4/7) + 2g (2/7) need 9 sevenths: two GPUs; memory 500 + 500 + 250
        (MIG, 3, 1000 + 9000 / 7, 200 + 40 + 10),
        # 300 + 460 + 240 fill one GPU exactly
        (MPS, 2, 2000, 0),
        # 2 + 2 + 1 replicas of 4: two GPUs; 500 + 500 + 250 of compute, no memory
        (TS, 3, 2250, 0),
    ],
)
def test_each_mode_on_a_handful_of_pods(
    mode: IsolationMode, in_use: int, reserved: float, stranded: float
) -> None:
    for seed in range(4):  # whatever the arrival order
        result = compare_mode([node(8)], SHARES, mode, seed=seed, inflate=0.25)
        end = result.at_end
        assert result.at_full == end  # 25 % arrived never reaches 100 %
        assert (end.arrived_milli, end.asked_milli, end.pods) == (2000, 2000, 4)
        assert (end.gpus_in_use, end.gpus_needed, end.failed_pods) == (in_use, in_use, 0)
        assert end.reserved_milli == pytest.approx(reserved)
        assert end.stranded_memory_milli == pytest.approx(stranded)


@pytest.mark.parametrize(
    ("mode", "failed", "needed", "stranded"),
    [(D, 1, 2, 700), (MIG, 0, 1, 200 + 50), (MPS, 0, 1, 0), (TS, 0, 1, 0)],
)
def test_a_failed_pod_counts_its_reservation_in_the_gpus_needed(
    mode: IsolationMode, failed: int, needed: int, stranded: float
) -> None:
    # one GPU; 300 + 450: MIG 3g + 4g share it, 2 + 2 replicas of 4 too; dedicated fails one
    pods = [pod("a", 300), pod("b", 450)]
    end = run([node(1)], pods, mode, 0.75).at_end
    assert (end.gpus_in_use, end.failed_pods, end.gpus_needed) == (1, failed, needed)
    if mode is D:  # whichever came first holds the GPU
        stranded = end.stranded_memory_milli
        assert stranded in (700, 550)
        assert end.failed_reserved_milli == 1000
    assert end.stranded_memory_milli == pytest.approx(stranded)


def test_all_replicas_or_a_7g_strand_what_the_pod_does_not_need() -> None:
    pods = [pod("a", 810)]
    stranded = {m: run([node(2)], pods, m, 0.405).at_end.stranded_memory_milli for m in MODES}
    assert stranded == {D: 190, MIG: 190, MPS: 0, TS: 190}


def test_mps_takes_at_most_48_clients_a_gpu() -> None:
    pods = [pod(f"p{i:02}", 10) for i in range(50)]  # 500 milli on one GPU: room for all
    end = run([node(1)], pods, MPS, 0.5).at_end
    assert (end.failed_pods, end.gpus_in_use, end.gpus_needed) == (2, 1, 2)
    sliced = run([node(1)], pods, TS, 0.5).at_end
    assert sliced.failed_pods == 46  # one replica each, 4 replicas


def test_the_100_percent_snapshot_is_before_the_pod_passing_capacity() -> None:
    pods = [pod("a", 1000), pod("b", 1000, num_gpu=2)]  # 3000 of 2000: stops at 1.5 x
    result = run([node(2)], pods, MPS, 1.5)
    assert result.at_end.arrived_milli == 3000
    assert result.at_full.arrived_milli in (1000, 2000)  # whichever pod came first
    assert result.at_full.pods == 1
    assert result.at_full.failed_pods == 0
    assert result.at_end.failed_pods == 1


def test_whole_gpu_pods_are_the_same_in_every_mode() -> None:
    nodes = [node(4, f"n{i}") for i in range(3)]
    pods = [pod(f"p{i}", 1000, num_gpu=1 + i % 3, cpu=5_000 * (i % 5)) for i in range(12)]
    ends = [run(nodes, pods, m, 1.3).at_end for m in MODES]
    assert all(end == ends[0] for end in ends)
    assert ends[0].stranded_memory_milli == 0


@pytest.mark.parametrize("policy", ["best-fit", "random", "fgd"])
def test_mps_with_whole_percent_shares_replays_exactly_as_replay(policy: str) -> None:
    # the same arrival order, node order and random draws as `replay`: the same failures
    nodes = [TraceNode(f"n{i}", 32_000, 65536, 4, "T4") for i in range(6)]
    pods = [pod(f"p{i}", 100 * (i % 10 + 1), cpu=2_000 * (i % 7)) for i in range(40)]
    for seed in (42, 43):
        replayed = replay(nodes, pods, policy, seed=seed, inflate=1.3)
        mine = compare_mode(nodes, pods, MPS, seed=seed, policy=policy, inflate=1.3)
        assert mine.at_end.failed_pods == replayed.failed_pods
        assert mine.at_end.pods == replayed.total_pods


def test_progress_and_a_cluster_without_gpus() -> None:
    calls: list[tuple[int, int]] = []
    compare_mode(
        [node(1)],
        [pod("a", 500)],
        MIG,
        seed=0,
        inflate=0.5,
        on_progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(1, 1)]
    with pytest.raises(ValueError, match="no GPUs"):
        compare_mode([node(0)], [pod("a", 500)], MIG, seed=0)


# -- summary ------------------------------------------------------------------------------------


def test_summary_means_over_seeds_and_the_csv() -> None:
    results = [
        compare_mode([node(8)], SHARES, mode, seed=seed, inflate=0.25)
        for mode in MODES
        for seed in (1, 2)
    ]
    rows = summarise(results)
    assert [(r.mode, r.at) for r in rows] == [(m, at) for m in MODES for at in ("100%", "end")]
    dedicated, mig = rows[0], rows[2]
    assert (dedicated.seeds, dedicated.gpus_needed, mig.gpus_needed) == (2, 4.0, 3.0)
    assert dedicated.asked_percent == 25.0  # 2000 of 8000
    assert dedicated.reserved_percent == 50.0
    assert dedicated.stranded_memory_gpus == 2.0
    assert dedicated.stranded_memory_percent == 25.0
    assert vs_dedicated(rows, mig) == 0.75
    lines = csv_text(rows).splitlines()
    assert lines[0].split(",") == list(CSV_HEADER)
    assert lines[0].startswith("mode,at,seeds,")
    assert lines[0].endswith(",gpus_needed_vs_dedicated")
    assert lines[3].startswith("mig,100%,2,25.0000,3.0000,3.0000,25.0000,")
    assert lines[3].endswith(",0.7500")
    assert len(lines) == 1 + 2 * len(MODES)


def test_time_slice_replicas_change_the_reservation() -> None:
    # 300 + 460 + 240 at 10 replicas: 3 + 5 + 3 = 11 > 10: two GPUs; 1100 milli taken
    end = run([node(8)], SHARES[:3], TS, 0.125, replicas=10).at_end
    assert end.arrived_milli == 1000
    assert end.gpus_in_use == 2
    assert end.reserved_milli == pytest.approx(1100)


# -- the openb trace ----------------------------------------------------------------------------


@pytest.mark.skipif(not OPENB.is_dir(), reason=f"the openb trace is not at {OPENB}")
def test_openb_dedicated_needs_the_most_gpus_and_mps_strands_the_least() -> None:
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_pods(OPENB / "openb_pod_list_default.csv")
    full = {m: compare_mode(nodes, pods, m, seed=42).at_full for m in MODES}
    needed = {m: s.gpus_needed for m, s in full.items()}
    stranded = {m: s.stranded_memory_milli for m, s in full.items()}
    assert max(needed, key=lambda m: needed[m]) is D
    assert max(stranded, key=lambda m: stranded[m]) is D
    assert min(stranded, key=lambda m: stranded[m]) is MPS
    assert stranded[MPS] == 0  # openb's shares are whole percents
    assert all(s.arrived_milli <= 6_212_000 < s.arrived_milli + 1000 * 8 for s in full.values())
    assert np.isclose(full[MPS].asked_milli, full[MPS].reserved_milli)
