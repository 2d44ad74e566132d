"""Who owns the other end of a TCP connection on this host: the `uid` column of the kernel's socket
tables (/proc/net/tcp and /proc/net/tcp6, readable by any user). The server's side of a
connection the gateway opened is the line whose local address is the gateway's peer and whose
remote address is the gateway's own end; its uid is the uid that made the listening socket (an
accepted socket, and one still waiting to be accepted, carry their listener's). It is about the
connection itself, so nothing can change between the look-up and the use.

The tables print each address as 32-bit words in the host's byte order (`%08X`), then the port
(`%04X`); an IPv4 connection to a listener on `::` is in tcp6 as an IPv4-mapped address
(`::ffff:127.0.0.1`). Parsing is pure (`table_address`, `owner_in_table`); `socket_owner` reads
the tables."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from typing import Literal

#: Where the kernel lists this network namespace's TCP sockets.
PROC_TCP = Path("/proc/net/tcp")
PROC_TCP6 = Path("/proc/net/tcp6")

#: TIME_WAIT: the remains of a closed connection, owned by nobody (uid 0 in the table).
_TIME_WAIT = b"06"

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


def canonical(host: str) -> str:
    """An IPv4-mapped IPv6 address as its IPv4 address; any other address as it is."""
    address = ipaddress.ip_address(host.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def is_loopback(host: str) -> bool:
    return ipaddress.ip_address(canonical(host)).is_loopback


def socket_owner(
    ours: Address,
    peer: Address,
    *,
    tcp: Path = PROC_TCP,
    tcp6: Path = PROC_TCP6,
    order: ByteOrder = sys.byteorder,
) -> int | None:
    """The uid owning the far end (`peer`) of this host's connection from `ours`; None when no
    socket of this network namespace is that end (the peer is on another machine, or the
    connection is already gone)."""
    our_host, peer_host = canonical(ours[0]), canonical(peer[0])
    ipv4 = isinstance(ipaddress.ip_address(peer_host), ipaddress.IPv4Address)
    tables = [(tcp, False), (tcp6, True)] if ipv4 else [(tcp6, False)]
    for path, mapped in tables:
        try:
            table = path.read_bytes()
        except OSError:  # no IPv6 on this host, say
            continue
        local = table_address(peer_host, peer[1], mapped=mapped, order=order)
        remote = table_address(our_host, ours[1], mapped=mapped, order=order)
        owner = owner_in_table(table, local, remote)
        if owner is not None:
            return owner
    return None
