"""Reading who owns the far end of a connection: from the kernel's socket tables, whose address
forms and lines below were captured from /proc/net/tcp and /proc/net/tcp6 on Linux (x86-64), with
a dual-stack listener on `::` (port 0xAE97) reached over 127.0.0.1 and ::1, and a listener of uid
65534 on 127.0.0.1 (port 0x978B) whose connection was not yet accepted; from sock_diag's requests
and replies (their layout, and a reply captured from the kernel); then against this machine's own
kernel, with real sockets, both ways."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplex.gateway.socket_owners import (
    TCP_NEW_SYN_RECV,
    DiagAnswer,
    canonical,
    diag_answer,
    diag_owner,
    diag_request,
    is_loopback,
    owner_in_table,
    socket_owner,
    table_address,
    table_owner,
)

TCP = b"""\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   2: 0100007F:4705 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 28739 1 00000000fe8beea2 100 0 0 10 0
   5: 0100007F:978B 00000000:0000 0A 00000000:00000001 00:00000000 00000000 65534        0 29134 2 00000000953cb30b 100 0 0 10 0
   6: 0100007F:98E6 0100007F:978B 01 00000000:00000000 00:00000000 00000000     0        0 29135 2 000000003895ead9 20 0 0 10 -1
   7: 0100007F:470E 0100007F:CC2A 06 00000000:00000000 03:00000BCD 00000000     0        0 0 3 0000000065eeb56c
   8: 0100007F:9398 0100007F:AE97 01 00000000:00000000 00:00000000 00000000     0        0 29124 2 0000000085c62ab8 20 0 0 10 -1
   9: 0100007F:978B 0100007F:98E6 01 00000000:00000000 00:00000000 00000000 65534        0 0 1 00000000813d371f 20 0 0 10 -1
"""

TCP6 = b"""\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:AE97 00000000000000000000000000000000:0000 0A 00000000:00000002 00:00000000 00000000     0        0 29123 3 00000000a06e8189 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:AE97 0000000000000000FFFF00000100007F:9398 01 00000000:00000000 00:00000000 00000000     0        0 0 1 00000000d4298cec 20 0 0 10 -1
   2: 00000000000000000000000001000000:AE97 00000000000000000000000001000000:9FF2 01 00000000:00000000 00:00000000 00000000     0        0 0 1 00000000fe765cd7 20 0 0 10 -1
   3: 00000000000000000000000001000000:9FF2 00000000000000000000000001000000:AE97 01 00000000:00000000 00:00000000 00000000     0        0 29125 2 000000002787f489 20 0 0 10 -1
"""


@pytest.mark.parametrize(
    ("host", "port", "mapped", "expected"),
    [
        ("127.0.0.1", 0x978B, False, "0100007F:978B"),
        ("127.0.0.1", 0xAE97, True, "0000000000000000FFFF00000100007F:AE97"),
        ("::1", 0x9FF2, False, "00000000000000000000000001000000:9FF2"),
        ("::", 0, False, "00000000000000000000000000000000:0000"),
        ("0.0.0.0", 0, False, "00000000:0000"),  # noqa: S104 - an address written, not bound
        ("10.1.2.3", 80, False, "0302010A:0050"),
    ],
)
def test_addresses_are_written_as_the_tables_print_them(
    host: str, port: int, mapped: bool, expected: str
) -> None:
    assert table_address(host, port, mapped=mapped) == expected


def test_a_big_endian_host_prints_words_in_network_order() -> None:
    assert table_address("127.0.0.1", 8080, order="big") == "7F000001:1F90"


def test_the_far_end_of_a_connection_not_yet_accepted_carries_its_listeners_uid() -> None:
    # the gateway's end is 127.0.0.1:0x98E6, the server's 127.0.0.1:0x978B (uid 65534)
    assert owner_in_table(TCP, "0100007F:978B", "0100007F:98E6") == 65534
    # the gateway's own end of the same connection is root's: direction matters
    assert owner_in_table(TCP, "0100007F:98E6", "0100007F:978B") == 0


def test_an_ipv4_connection_to_a_dual_stack_listener_is_found_mapped_in_tcp6() -> None:
    local = table_address("127.0.0.1", 0xAE97, mapped=True)
    remote = table_address("127.0.0.1", 0x9398, mapped=True)
    assert owner_in_table(TCP6, local, remote) == 0
    assert owner_in_table(TCP, table_address("127.0.0.1", 0xAE97), "0100007F:9398") is None


def test_an_ipv6_connection_is_found_in_tcp6() -> None:
    local, remote = table_address("::1", 0xAE97), table_address("::1", 0x9FF2)
    assert owner_in_table(TCP6, local, remote) == 0


def test_listeners_time_wait_remains_and_other_connections_are_not_a_match() -> None:
    assert owner_in_table(TCP, "0100007F:978B", "00000000:0000") == 65534  # the listener itself
    assert owner_in_table(TCP, "0100007F:470E", "0100007F:CC2A") is None  # TIME_WAIT: nobody's
    assert owner_in_table(TCP, "0100007F:978B", "0100007F:98E7") is None  # one port off
    assert owner_in_table(b"", "0100007F:978B", "0100007F:98E6") is None


def test_mapped_addresses_are_their_ipv4_address_and_loopback_is_all_of_127() -> None:
    assert canonical("::ffff:127.0.0.1") == "127.0.0.1"
    assert canonical("::1") == "::1"
    assert is_loopback("127.3.4.5")
    assert is_loopback("::1")
    assert is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("10.0.0.1")
    assert not is_loopback("::ffff:10.0.0.1")


def test_the_tables_given_are_read(tmp_path: Path) -> None:
    tcp, tcp6 = tmp_path / "tcp", tmp_path / "tcp6"
    tcp.write_bytes(TCP)
    tcp6.write_bytes(TCP6)
    ours, theirs = ("127.0.0.1", 0x98E6), ("127.0.0.1", 0x978B)
    assert table_owner(ours, theirs, tcp=tcp, tcp6=tcp6, order="little") == 65534
    mapped = table_owner(("127.0.0.1", 0x9398), ("127.0.0.1", 0xAE97), tcp=tcp, tcp6=tcp6)
    assert mapped == 0
    assert table_owner(("::1", 0x9FF2), ("::1", 0xAE97), tcp=tcp, tcp6=tcp6) == 0
    assert table_owner(ours, theirs, tcp=tmp_path / "none", tcp6=tmp_path / "none") is None


# --- sock_diag --------------------------------------------------------------------------------

#: The kernel's reply (captured) to a request for the server's end, 127.0.0.1:37583, of a
#: connection from 127.0.0.1:47762, owned by uid 65534 and not yet accepted: nlmsghdr (length 124,
#: SOCK_DIAG_BY_FAMILY), inet_diag_msg (AF_INET, ESTABLISHED, the socket's id and cookie, timer,
#: queues, uid 0xfffe, inode 0), then attributes.
REPLY = bytes.fromhex(
    "7c00000014000000010000005e1100000201000092cfba927f00000100000000"
    "00000000000000007f0000010000000000000000000000000000000006100000"
    "00000000000000000000000000000000feff0000000000000500080000000000"
    "08000f00000000000c00150001000000000000000600160052000000"
)


def test_a_request_names_the_socket_by_its_own_address_first() -> None:
    request = diag_request(("127.0.0.1", 37583), ("127.0.0.1", 47762), sequence=7)
    length, kind, flags, sequence, _ = struct.unpack_from("=IHHII", request)
    assert (length, kind, flags, sequence) == (len(request), 20, 1, 7)  # no NLM_F_DUMP: exact
    family, protocol = request[16], request[17]
    assert (family, protocol) == (socket.AF_INET, socket.IPPROTO_TCP)
    sockid = request[24:]
    assert sockid[:4] == REPLY[20:24]  # its port, then the remote's (big-endian), as replied
    assert sockid[4:20] == bytes.fromhex("7f000001") + bytes(12)
    assert sockid[20:36] == bytes.fromhex("7f000001") + bytes(12)
    assert sockid[40:48] == b"\xff" * 8  # no cookie to check
    six = diag_request(("::1", 1), ("::1", 2))
    assert six[16] == socket.AF_INET6
    assert six[28:44] == bytes(15) + b"\x01"


def test_replies_found_missing_half_open_and_closed() -> None:
    assert diag_answer(REPLY) == DiagAnswer(found=True, uid=65534, state=1)
    assert diag_answer(REPLY).settled()
    enoent = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -errno.ENOENT) + bytes(16)
    missing = diag_answer(enoent)
    assert missing == DiagAnswer(found=False, error=errno.ENOENT)
    assert missing.settled()  # no such socket here: nobody's
    half_open = REPLY[:17] + bytes([TCP_NEW_SYN_RECV]) + REPLY[18:]
    assert not diag_answer(half_open).settled()  # reported as root's: ask the tables
    closed = REPLY[:17] + bytes([6]) + REPLY[18:]
    assert diag_answer(closed) == DiagAnswer(found=False, error=errno.ENOENT)
    assert not diag_answer(b"").settled()
    refused = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -errno.EINVAL) + bytes(16)
    assert not diag_answer(refused).settled()


# --- against this machine's tables -----------------------------------------------------------


@pytest.mark.parametrize(
    ("family", "listen_on", "connect_to"),
    [
        (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
        (socket.AF_INET, "0.0.0.0", "127.0.0.1"),  # noqa: S104 - a listener on loopback's host
        (socket.AF_INET6, "::", "127.0.0.1"),  # dual-stack: the connection is in tcp6, mapped
        (socket.AF_INET6, "::1", "::1"),
    ],
)
def test_the_real_tables_name_this_process_as_the_owner_of_its_listener(
    family: socket.AddressFamily, listen_on: str, connect_to: str
) -> None:
    try:
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        pytest.skip("no IPv6 here")
    with listener:
        try:
            listener.bind((listen_on, 0))
        except OSError:
            pytest.skip(f"cannot listen on {listen_on} here")
        listener.listen()
        port = listener.getsockname()[1]
        with socket.create_connection((connect_to, port)) as client:
            ours = client.getsockname()[:2]
            theirs = (connect_to, port)
            other = (connect_to, port + 1 if port < 65535 else 1)
            me = os.geteuid()
            assert asyncio.run(socket_owner(ours, theirs)) == me
            assert asyncio.run(socket_owner(ours, other)) is None
            assert table_owner(ours, theirs) == me
            assert table_owner(ours, other) is None
            local = (canonical(connect_to), port)
            answer = diag_owner(local, (canonical(ours[0]), ours[1]))
            assert (answer.found, answer.uid) == (True, me)


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a listener as another user needs root")
def test_a_listener_of_another_user_is_named_before_it_accepts() -> None:
    code = (
        "import socket,sys,time\n"
        "s=socket.socket();s.bind(('127.0.0.1',0));s.listen()\n"
        "print(s.getsockname()[1],flush=True);sys.stdin.read()\n"
    )
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable]
    with subprocess.Popen(  # noqa: S603 - this interpreter, the script above
        [*argv, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            with socket.create_connection(("127.0.0.1", port)) as client:
                ours = client.getsockname()[:2]
                assert asyncio.run(socket_owner(ours, ("127.0.0.1", port))) == 65534
                assert table_owner(ours, ("127.0.0.1", port)) == 65534
        finally:
            child.kill()
