"""bench/suite_test_cpu.py: an inner pytest session with the plugin writes one line per test with
the CPU the test spent itself and in the processes it waited for; the table sums them by file or
folder and shows the machine's busy CPU the tests do not account for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.suite_test_cpu import OUT_ENV, CpuOfTest, by_place, place, read_lines, table

ROOT = Path(__file__).resolve().parents[2]

TESTS = """\
import subprocess
import sys
import time

def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def test_spins_itself():
    spin(0.3)

def test_waits_for_a_child_that_spins():
    code = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", code], check=True)

def test_sleeps():
    time.sleep(0.3)
"""


def test_each_test_gets_its_own_cpu_and_its_childrens(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(TESTS)
    out = tmp_path / "out"
    out.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment |= {OUT_ENV: str(out), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-p", "bench.suite_test_cpu", "-n", "0", "-q"]
    command += ["-p", "no:cacheprovider", str(tmp_path / "test_inner.py")]
    done = subprocess.run(  # noqa: S603 - pytest on a file written here
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = {test.nodeid.rsplit("::", 1)[1]: test for test in read_lines(out)}
    assert set(tests) == {"test_spins_itself", "test_waits_for_a_child_that_spins", "test_sleeps"}
    itself, child, sleeps = (
        tests["test_spins_itself"],
        tests["test_waits_for_a_child_that_spins"],
        tests["test_sleeps"],
    )
    assert itself.worker_s >= 0.25
    assert itself.children_s < 0.05
    assert child.children_s >= 0.25
    assert child.worker_s < 0.25
    assert sleeps.worker_s < 0.1
    assert sleeps.children_s < 0.05
    assert sleeps.wall_s >= 0.29


def test_the_controllers_file_is_left_out_where_workers_wrote(tmp_path: Path) -> None:
    (tmp_path / "main.tsv").write_text("9.000\t0.000\t9.000\ttests/a.py::test_x\n")
    (tmp_path / "gw0.tsv").write_text("1.000\t2.000\t4.000\ttests/a.py::test_x\n")
    assert read_lines(tmp_path) == [CpuOfTest("tests/a.py::test_x", 1.0, 2.0, 4.0)]
    (tmp_path / "gw0.tsv").unlink()
    assert read_lines(tmp_path) == [CpuOfTest("tests/a.py::test_x", 9.0, 0.0, 9.0)]


def test_rows_sum_by_file_or_folder_and_the_rest_is_unattributed() -> None:
    tests = [
        CpuOfTest("tests/e2e/test_a.py::test_1", 1.0, 3.0, 5.0),
        CpuOfTest("tests/e2e/test_a.py::test_2[x::y]", 1.0, 1.0, 2.0),
        CpuOfTest("tests/unit/test_b.py::Case::test_3", 2.0, 0.0, 2.0),
    ]
    assert place(tests[1].nodeid, 0) == "tests/e2e/test_a.py"
    assert place(tests[2].nodeid, 2) == "tests/unit"
    rows = by_place(tests, 0)
    assert rows["tests/e2e/test_a.py"].cpu_s == 6.0
    assert rows["tests/e2e/test_a.py"].tests == 2
    lines = table(rows, busy_s=10.0, top=1)
    assert lines[2] == "| 6.0 | 60.0 % | 2.0 | 4.0 | 7.0 | 2 | tests/e2e/test_a.py |"
    assert lines[3] == "| 2.0 | 20.0 % | | | | 1 | the rest |"
    assert lines[4] == "| 2.0 | 20.0 % | | | | | unattributed |"
