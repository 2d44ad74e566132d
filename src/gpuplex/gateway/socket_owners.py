"""Who owns the other end of a TCP connection on this host. The server's side of a connection the
gateway opened is the socket whose local address is the gateway's peer and whose remote address is
the gateway's own end; its owner is the uid that made the listening socket (an accepted socket, and
one still waiting to be accepted, carry their listener's). It is about the connection itself, so
nothing can change between the look-up and the use.

It is asked of the kernel's socket diagnostics (netlink `NETLINK_SOCK_DIAG`, an exact look-up of
that one socket by its addresses: `diag_request`, `diag_answer`), open to any user and a hash
look-up away, about 50 µs. Where that cannot answer (no sock_diag in this kernel, or the server's
end is still a half-open request, which it reports as root's), the socket tables /proc/net/tcp and
/proc/net/tcp6 (readable by any user) have the same owner in their `uid` column; reading them walks
every bucket of the kernel's connection table (several milliseconds on a host with a large one), so
`socket_owner` reads them in a worker thread. The tables print each address as 32-bit words in the
host's byte order (`%08X`), then the port (`%04X`); an IPv4 connection to a listener on `::` is in
tcp6 as an IPv4-mapped address (`::ffff:127.0.0.1`). Parsing both answers is pure (`diag_answer`,
`table_address`, `owner_in_table`)."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: Where the kernel lists this network namespace's TCP sockets.
PROC_TCP = Path("/proc/net/tcp")
PROC_TCP6 = Path("/proc/net/tcp6")

#: TIME_WAIT: the remains of a closed connection, owned by nobody (uid 0 in the table).
_TIME_WAIT = b"06"

#: linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h, net/tcp_states.h
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_DIAG_REQUEST = struct.Struct("=BBBBI")  # family, protocol, extensions, pad, states
_NO_COOKIE = 0xFFFFFFFF
_ALL_STATES = 0xFFFFFFFF
TCP_SYN_RECV = 3
TCP_TIME_WAIT = 6
TCP_NEW_SYN_RECV = 12
#: inet_diag_msg: family, state, timer, retransmits, the socket's id (48 bytes), expires,
#: receive queue, send queue, then the uid
_UID_OFFSET = 4 + 48 + 12

Address = tuple[str, int]
ByteOrder = Literal["little", "big"]


def table_address(
    host: str, port: int, *, mapped: bool = False, order: ByteOrder = "little"
) -> str:
    """`host:port` as the socket tables print it: IPv4 in tcp (`0100007F:1F90` for 127.0.0.1:8080
    on a little-endian host), IPv6 in tcp6; `mapped`: an IPv4 address as tcp6 prints it
    (`::ffff:a.b.c.d`)."""
    address = ipaddress.ip_address(host)
    if mapped and isinstance(address, ipaddress.IPv4Address):
        address = ipaddress.IPv6Address(f"::ffff:{address}")
    packed = address.packed
    words = (packed[i : i + 4] for i in range(0, len(packed), 4))
    hex_address = "".join(f"{int.from_bytes(word, order):08X}" for word in words)
    return f"{hex_address}:{port:04X}"


def owner_in_table(table: bytes, local: str, remote: str) -> int | None:
    """The uid of the socket whose local and remote addresses are `local` and `remote` (in the
    table's form), in the text of a socket table; None when it has none (TIME_WAIT remains are
    not sockets anyone owns)."""
    needle = f" {local} {remote} ".encode("ascii")
    at = table.find(needle)
    while at >= 0:
        line_end = table.find(b"\n", at)
        fields = table[at : line_end if line_end >= 0 else len(table)].split()
        # local, remote, state, tx:rx queues, timer, retransmits, uid, ...
        if len(fields) >= 7 and fields[2] != _TIME_WAIT and fields[6].isdigit():
            return int(fields[6])
        at = table.find(needle, at + 1)
    return None


@dataclass(frozen=True, slots=True)
class DiagAnswer:
    """What sock_diag said of one socket: `found` and its `uid` and TCP `state`, or `error`
    (an errno: ENOENT when there is no such socket)."""

    found: bool
    uid: int | None = None
    state: int | None = None
    error: int | None = None

    def settled(self) -> bool:
        """Whether it says who owns the socket (a half-open request is reported as root's, and
        the remains of a closed connection are nobody's)."""
        if not self.found:
            return self.error == errno.ENOENT
        return self.state not in (TCP_SYN_RECV, TCP_NEW_SYN_RECV)


def diag_request(local: Address, remote: Address, sequence: int = 1) -> bytes:
    """A sock_diag request for exactly the TCP socket with these `local` and `remote` addresses
    (IPv4 in an AF_INET request, which finds a dual-stack listener's IPv4 connections too)."""
    local_address = ipaddress.ip_address(local[0])
    remote_address = ipaddress.ip_address(remote[0])
    family = socket.AF_INET if local_address.version == 4 else socket.AF_INET6
    sockid = struct.pack(">HH", local[1], remote[1])
    sockid += local_address.packed.ljust(16, b"\0") + remote_address.packed.ljust(16, b"\0")
    sockid += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)  # any interface, no cookie check
    body = _DIAG_REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + sockid
    header = _NLMSG_HEADER.pack(
        _NLMSG_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, sequence, 0
    )
    return header + body


def diag_answer(reply: bytes) -> DiagAnswer:
    """The answer to a `diag_request`, from the kernel's reply."""
    if len(reply) < _NLMSG_HEADER.size + 4:
        return DiagAnswer(found=False, error=0)
    _, kind, _, _, _ = _NLMSG_HEADER.unpack_from(reply)
    payload = _NLMSG_HEADER.size
    if kind == NLMSG_ERROR:
        return DiagAnswer(found=False, error=-struct.unpack_from("=i", reply, payload)[0])
    if kind != SOCK_DIAG_BY_FAMILY or len(reply) < payload + _UID_OFFSET + 4:
        return DiagAnswer(found=False, error=0)
    state = reply[payload + 1]
    (uid,) = struct.unpack_from("=I", reply, payload + _UID_OFFSET)
    if state == TCP_TIME_WAIT:
        return DiagAnswer(found=False, error=errno.ENOENT)
    return DiagAnswer(found=True, uid=uid, state=state)


def diag_owner(local: Address, remote: Address) -> DiagAnswer:
    """Ask sock_diag (blocking, but answered at once: the kernel replies as the request is sent)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        diag.settimeout(1.0)
        diag.send(diag_request(local, remote))
        return diag_answer(diag.recv(65536))


def canonical(host: str) -> str:
    """An IPv4-mapped IPv6 address as its IPv4 address; any other address as it is."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(canonical(host)).is_loopback


async def socket_owner(ours: Address, peer: Address) -> int | None:
    """The uid owning the far end (`peer`) of this host's connection from `ours`; None when no
    socket of this network namespace is that end (the peer is on another machine, or the
    connection is already gone). sock_diag first; the socket tables, in a worker thread, when it
    cannot say."""
    local, remote = (canonical(peer[0]), peer[1]), (canonical(ours[0]), ours[1])
    try:
        answer = diag_owner(local, remote)
    except OSError:
        answer = DiagAnswer(found=False)
    if answer.settled():
        return answer.uid
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, table_owner, ours, peer)


def table_owner(
    ours: Address,
    peer: Address,
    *,
    tcp: Path = PROC_TCP,
    tcp6: Path = PROC_TCP6,
    order: ByteOrder = sys.byteorder,
) -> int | None:
    """`socket_owner` from the socket tables (blocking: several milliseconds on a busy host)."""
    our_host, peer_host = canonical(ours[0]), canonical(peer[0])
    ipv4 = isinstance(ipaddress.ip_address(peer_host), ipaddress.IPv4Address)
    tables = [(tcp, False), (tcp6, True)] if ipv4 else [(tcp6, False)]
    for path, mapped in tables:
        try:
            table = read_table(path)
        except OSError:  # no IPv6 on this host, say
            continue
        local = table_address(peer_host, peer[1], mapped=mapped, order=order)
        remote = table_address(our_host, ours[1], mapped=mapped, order=order)
        owner = owner_in_table(table, local, remote)
        if owner is not None:
            return owner
    return None


def read_table(path: Path) -> bytes:
    """A /proc table, in reads of a MiB: each read walks the kernel's whole connection table
    again, so few large ones (Python's default reads are 8 KiB)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = []
        while part := os.read(fd, 1 << 20):
            parts.append(part)
        return b"".join(parts)
    finally:
        os.close(fd)
