"""bench/suite_cpu.py reads the kernel's accounting file as linux/acct.h lays out `struct acct_v3`:
records written here field by field at the header's offsets, not with the script's own struct."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from bench.suite_cpu import WORKERS, Exited, comp_t, kind_of, read_accounting, report


def acct_v3(comm: bytes, pid: int, ppid: int, utime: int, stime: int, etime_s: float) -> bytes:
    """One 64-byte record: ac_flag 0, ac_version 3, ac_tty 2, ac_exitcode 4, ac_uid 8, ac_gid 12,
    ac_pid 16, ac_ppid 20, ac_btime 24, ac_etime 28 (float), ac_utime 32, ac_stime 34 (comp_t),
    ... ac_comm 48 (16 bytes)."""
    record = bytearray(64)
    record[1] = 3
    struct.pack_into("<I", record, 16, pid)
    struct.pack_into("<I", record, 20, ppid)
    struct.pack_into("<f", record, 28, etime_s * 100)
    struct.pack_into("<H", record, 32, utime)
    struct.pack_into("<H", record, 34, stime)
    record[48 : 48 + len(comm)] = comm
    return bytes(record)


def test_comp_t_is_a_13_bit_mantissa_with_a_base_8_exponent() -> None:
    assert comp_t(1234) == 1234
    assert comp_t((2 << 13) | 100) == 100 * 64  # exponent 2: times 8 squared


def test_records_are_read_at_the_headers_offsets(tmp_path: Path) -> None:
    log = tmp_path / "pacct"
    log.write_bytes(
        acct_v3(b"pytest", 10, 1, 300, 50, 60.0)
        + acct_v3(b"python", 11, 10, (1 << 13) | 2500, 100, 59.0)  # 20,000 ticks of user time
        + acct_v3(b"gloo_tcp_loop", 12, 1, 1200, 0, 40.0)
    )
    exited = list(read_accounting(log))
    assert exited[0] == Exited("pytest", 10, 1, 3.5, 60.0)
    assert exited[1].cpu_s == 201.0
    assert (exited[2].comm, exited[2].cpu_s) == ("gloo_tcp_loop", 12.0)


def test_a_record_of_another_version_is_refused(tmp_path: Path) -> None:
    record = bytearray(acct_v3(b"python", 1, 0, 1, 1, 1.0))
    record[1] = 2
    log = tmp_path / "pacct"
    log.write_bytes(bytes(record))
    with pytest.raises(SystemExit, match="not acct v3"):
        list(read_accounting(log))


def test_workers_are_pytests_children_and_python311_is_not_python() -> None:
    worker = Exited("python", 11, 10, 1.0, 1.0)
    started = Exited("python", 12, 11, 1.0, 1.0)
    assert kind_of(worker, {11}) == WORKERS
    assert kind_of(started, {11}).startswith("Python")
    assert kind_of(Exited("python3.11", 13, 12, 1.0, 1.0), {11}).startswith("python3.11")
    assert kind_of(Exited("kube-apiserver", 14, 11, 1.0, 1.0), {11}).startswith("Kubernetes")
    assert kind_of(Exited("bash", 15, 11, 1.0, 1.0), {11}) == "other"


def test_the_report_sums_each_kind(capsys: pytest.CaptureFixture[str]) -> None:
    exited = [
        Exited("pytest", 10, 1, 2.0, 9.0),
        Exited("python", 11, 10, 30.0, 9.0),  # a worker
        Exited("python", 12, 11, 5.0, 1.0),
        Exited("python", 13, 11, 5.0, 1.0),
        Exited("postgres", 14, 1, 8.0, 1.0),
    ]
    report(10.0, 0.95, exited, top=2)
    out = capsys.readouterr().out
    assert "CPUs busy 95.0 %" in out
    assert "30.0  60.0%         1  pytest workers" in out
    assert "12.0  24.0%         3  Python: gpuplex processes and CLI runs" in out
    assert "50.0 100.0%         5  all processes that exited" in out
