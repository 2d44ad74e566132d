"""The replay shows fair share over time: three tenants of weights 1:2:3 keep one-GPU jobs queued
on a small cluster for twelve hours; with a half-life their GPU-time shares land within 5 points
of 1/6, 2/6 and 3/6, while ordering by what each holds now (no memory) strands the lightest."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.openb import TimedPod

WEIGHTS = {"light": 1.0, "middle": 2.0, "heavy": 3.0}
WINDOW_S = 12 * 3600.0


def gpu_time_shares(gpus: int, half_life_s: float) -> dict[str, float]:
    """Each tenant's share of the GPU-seconds used in the window, in percent."""
    nodes = [TraceNode("n0", 64_000, 256 * 1024, gpus, "V100")]
    rng = np.random.default_rng(7)
    pods: list[TimedPod] = []
    owners: list[str] = []
    for tenant in WEIGHTS:  # more one-GPU jobs than the window can run: all stay queued
        for i in range(int(gpus * WINDOW_S / 300) + 10):
            runtime = float(rng.uniform(300, 900))
            pods.append(TimedPod(TracePod(f"{tenant}-{i}", 1_000, 1_024, 1, 1_000), 0.0, runtime))
            owners.append(tenant)
    leaves = tuple(QueueNode(t, "tenant", {}, weight=w) for t, w in WEIGHTS.items())
    cap = {GPUS: float(gpus)}
    root = QueueNode("cluster", "cluster", cap, cap, children=leaves)
    tree = QueueTree.of(root, cap, half_life_s)
    result = replay_jobs(nodes, pods, owners, tree=tree, policy="best-fit", seed=1, samples=10)
    used = dict.fromkeys(WEIGHTS, 0.0)
    for record in result.records:
        if record.start_s is None or record.start_s >= WINDOW_S:
            continue
        end = WINDOW_S if record.end_s is None else min(record.end_s, WINDOW_S)
        used[record.tenant] += (end - record.start_s) * record.gpus
    total = sum(used.values())
    return {tenant: 100 * seconds / total for tenant, seconds in used.items()}


@pytest.mark.parametrize("gpus", [3, 4, 8])
def test_gpu_time_shares_land_within_5_points_of_the_weights(gpus: int) -> None:
    shares = gpu_time_shares(gpus, half_life_s=3600.0)
    for tenant, weight in WEIGHTS.items():
        assert shares[tenant] == pytest.approx(100 * weight / 6, abs=5.0), shares


def test_without_memory_the_lightest_tenant_gets_a_share_far_from_its_weight() -> None:
    shares = gpu_time_shares(4, half_life_s=0.0)
    assert shares["light"] == pytest.approx(25.0, abs=0.5)  # 1 GPU of 4, where 2/3 is its due
    assert abs(shares["light"] - 100 / 6) > 5.0
