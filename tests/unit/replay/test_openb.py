"""Reading openb node and pod CSVs, and the errors that name file:line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.errors import EXIT_BAD_INPUT, ErrorCode, TraceInputError
from gpuplex.replay.openb import load_nodes, load_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,G2\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p0,12000,16384,1,1000,,LS\n"
    "p1,6000,12288,1,460,V100M16|V100M32,BE\n"
    "p2,4000,8192,0,0,,LS\n"
    "p3,32000,65536,8,1000,,LS\n"
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_nodes_and_pods_load(tmp_path: Path) -> None:
    assert load_nodes(write(tmp_path, NODES)) == [
        TraceNode("n0", 64000, 262144, 2, "P100"),
        TraceNode("n1", 96000, 786432, 8, "G2"),
    ]
    pods = load_pods(write(tmp_path, PODS))
    assert pods[1] == TracePod("p1", 6000, 12288, 1, 460, ("V100M16", "V100M32"))
    assert [p.total_gpu_milli for p in pods] == [1000, 460, 0, 8000]
    assert [p.is_shared for p in pods] == [False, True, False, False]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (NODES.replace("n1,96000", "n1,lots"), ":3: column cpu_milli (2): 'lots' is not a whole"),
        (NODES.replace(",2,P100", ",-2,P100"), ":2: column gpu (4): -2 is negative"),
        (NODES.replace("n1,", "n0,"), ":3: column sn (1): 'n0' is already the name on line 2"),
        (NODES.replace(",2,P100", ",2,"), ":2: column model (5): empty, but the node has 2 GPUs"),
        (NODES.replace("n1,96000,786432,8,G2", "n1,96000"), ":3: column memory_mib (3): missing"),
        ("sn,cpu_milli,gpu\nn0,1,1\n", ":1: the header lacks column(s) memory_mib, model"),
        ("sn,cpu_milli,memory_mib,gpu,model\n", ": no nodes"),
    ],
)
def test_bad_node_files_name_where(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TraceInputError) as caught:
        load_nodes(path)
    assert str(caught.value).startswith(f"{path}{where}")
    assert caught.value.code == ErrorCode.TRACE_INVALID
    assert caught.value.exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (PODS.replace("p1,6000,12288,1,460", "p1,6000,12288,1,1460"), ":3: column gpu_milli (5): 1460 is more than 1000"),
        (PODS.replace("p2,4000,8192,0,0", "p2,4000,8192,0,300"), ":4: column gpu_milli (5): 300 of a GPU, but num_gpu is 0"),
        (PODS.replace("p0,12000,16384,1,1000", "p0,12000,16384,1,0"), ":2: column gpu_milli (5): 0, but num_gpu is 1"),
        (PODS.replace("p3,32000,65536,8,1000", "p3,32000,65536,8,500"), ":5: column gpu_milli (5): 500: a pod of 8 GPUs"),
        (PODS.replace("p3,", "p0,"), ":5: column name (1): 'p0' is already the name on line 2"),
        (PODS.replace("p2,4000", "p2,4.5"), ":4: column cpu_milli (2): '4.5' is not a whole number"),
    ],
)  # fmt: skip
def test_bad_pod_files_name_where(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TraceInputError) as caught:
        load_pods(path)
    assert str(caught.value).startswith(f"{path}{where}")


def test_a_missing_or_binary_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceInputError, match="cannot be read"):
        load_pods(tmp_path / "absent.csv")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00name\n")
    with pytest.raises(TraceInputError, match="not a readable CSV"):
        load_pods(binary)
