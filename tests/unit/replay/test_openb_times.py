"""`load_timed_pods`: the pods with their arrival and runtime from creation_time and
deletion_time; an empty deletion time runs to the end, one before the creation is an error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuplex.errors import TraceInputError
from gpuplex.replay.openb import load_timed_pods

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time,deletion_time\n"


def test_times_become_arrival_and_runtime(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + "a,1000,1024,1,500,,10,25\nb,1000,1024,0,0,,7,\n")
    a, b = load_timed_pods(path)
    assert (a.pod.name, a.arrival_s, a.runtime_s, a.pod.gpu_milli) == ("a", 10.0, 15.0, 500)
    assert (b.arrival_s, b.runtime_s) == (7.0, None)


@pytest.mark.parametrize(
    ("row", "where"),
    [
        ("a,1000,1024,1,500,,30,25", "pods.csv:2: column deletion_time (8): 25 is before"),
        ("a,1000,1024,1,500,,x,25", "pods.csv:2: column creation_time (7): 'x' is not"),
    ],
)
def test_bad_times_name_where(tmp_path: Path, row: str, where: str) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(HEADER + row + "\n")
    with pytest.raises(TraceInputError, match=re.escape(where)):
        load_timed_pods(path)


def test_a_pod_list_without_times_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\n")
    with pytest.raises(TraceInputError, match="lacks column"):
        load_timed_pods(path)
