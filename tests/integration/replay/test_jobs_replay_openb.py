"""The jobs replay on the real openb trace (a few hundred pods over every 20th node): every pod
starts no earlier than it arrived and ends no earlier than it started, under the queue rules and
FIFO, and nearly all start. Skips where ../shared/data/openb is absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.openb import load_nodes, load_timed_pods
from gpuplex.replay.tenants_file import parse_tenants_file
from gpuplex.specfile import load_yaml_file

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT.parent / "shared" / "data" / "openb"

pytestmark = pytest.mark.skipif(
    not (DATA / "openb_pod_list_default.csv").exists(), reason=f"no openb trace at {DATA}"
)


def test_a_few_hundred_openb_pods_through_the_queues() -> None:
    nodes = load_nodes(DATA / "openb_node_list_gpu_node.csv")[::40]
    pods = load_timed_pods(DATA / "openb_pod_list_default.csv")[5000:5300]
    tenants = load_yaml_file(ROOT / "bench" / "jobs_tenants.yaml", parse_tenants_file)
    owners = tenants.assign([p.pod.name for p in pods], np.random.default_rng(1))
    tree = tenants.tree({GPUS: float(sum(n.gpus for n in nodes))})
    for rules in (tree, None):
        result = replay_jobs(
            nodes, pods, owners, tree=rules, policy="best-fit", seed=1, speedup=200
        )
        assert result.samples
        for record in result.records:
            if record.start_s is not None:
                assert record.start_s >= record.arrival_s
            if record.end_s is not None:
                assert record.start_s is not None
                assert record.end_s >= record.start_s
        started = sum(r.start_s is not None for r in result.records)
        assert started >= len(pods) * 0.9
