"""`gpuplex simulate --arrivals stream` end to end on a tiny CSV, and the stream itself: the same
seed draws the same stream, every placed pod leaves, a pod no node takes fails, and options that
belong to other arrivals are refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.core.trace import TraceNode
from gpuplex.replay.openb import load_timed_pods
from gpuplex.replay.stream import openb_stream, replay_stream

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100\nn1,64000,262144,2,V100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    + "".join(f"one{i},4000,1024,1,1000,,LS,Running,0,{100 + i * 50},0\n" for i in range(6))
    + "two,4000,1024,2,1000,,LS,Running,0,300,0\n"
    + "four,4000,1024,4,1000,,LS,Running,0,200,0\n"
    + "eight,8000,1024,8,1000,,LS,Running,0,400,0\n"
    + "share,1000,1024,1,500,,LS,Running,0,100,0\n"  # fractional: never drawn
)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    return tmp_path / "nodes.csv", tmp_path / "pods.csv"


def test_a_seed_draws_one_stream_of_whole_gpu_pods_each_leaving_once(tmp_path: Path) -> None:
    _, pods = _files(tmp_path)
    timed = load_timed_pods(pods)
    stream = openb_stream(timed, pods=40, seed=3, spacing=4)
    assert stream == openb_stream(timed, pods=40, seed=3, spacing=4)
    assert stream != openb_stream(timed, pods=40, seed=4, spacing=4)
    arrivals = [e.index for e in stream if e.arrives]
    departures = [e.index for e in stream if not e.arrives]
    assert sorted(arrivals) == sorted(departures) == list(range(40))
    for index in range(40):  # each leaves after it arrived
        assert stream.index(next(e for e in stream if e.index == index and e.arrives)) < next(
            i for i, e in enumerate(stream) if e.index == index and not e.arrives
        )
    assert {e.pod.gpu_milli for e in stream} == {1000}
    assert {e.pod.num_gpu for e in stream} <= {1, 2, 4, 8}


def test_a_pod_no_node_takes_fails_and_nothing_stays_allocated(tmp_path: Path) -> None:
    _, pods = _files(tmp_path)
    stream = openb_stream(load_timed_pods(pods), pods=60, seed=1, spacing=20)
    nodes = [TraceNode("n0", 64000, 262144, 8, "V100"), TraceNode("n1", 64000, 262144, 2, "V100")]
    result = replay_stream(nodes, stream, "best-fit")
    assert result.failed > 0
    assert len(result.placed) + result.failed == 60
    assert result.allocated_gpus[-1] == 0  # every placed pod left
    assert 0 < result.allocation_percent < 100


def test_the_command_prints_each_policy_and_writes_stream_csv(tmp_path: Path) -> None:
    nodes, pods = _files(tmp_path)
    argv = ["simulate", "--arrivals", "stream", "--nodes", str(nodes), "--pods", str(pods)]
    argv += ["--policy", "best-fit", "--policy", "first-fit", "--seeds", "2", "--first-seed", "1"]
    argv += ["--stream-pods", "50", "--stream-spacing", "5", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert "best-fit" in result.output
    assert "first-fit" in result.output
    with (tmp_path / "out" / "stream.csv").open() as written:
        rows = list(csv.DictReader(written))
    assert [(r["policy"], r["seed"]) for r in rows] == [
        ("best-fit", "1"),
        ("best-fit", "2"),
        ("first-fit", "1"),
        ("first-fit", "2"),
    ]
    expected = replay_stream(
        [TraceNode("n0", 64000, 262144, 8, "V100"), TraceNode("n1", 64000, 262144, 2, "V100")],
        openb_stream(load_timed_pods(pods), pods=50, seed=2, spacing=5),
        "first-fit",
    )
    assert float(rows[3]["allocation_percent"]) == pytest.approx(
        expected.allocation_percent, abs=1e-3
    )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--arrivals", "inflate", "--stream-pods", "5"], "only applies with --arrivals stream"),
        (["--arrivals", "stream", "--speedup", "2"], "not with --arrivals stream"),
        (["--arrivals", "stream", "--policy", "best-fits"], "unknown policy 'best-fits'"),
    ],
)
def test_options_of_other_arrivals_are_refused(
    tmp_path: Path, extra: list[str], words: str
) -> None:
    nodes, pods = _files(tmp_path)
    argv = ["simulate", "--nodes", str(nodes), "--pods", str(pods), *extra]
    result = CliRunner().invoke(
        app, [*argv, "--out", str(tmp_path / "out")], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 2
    assert words in result.output
