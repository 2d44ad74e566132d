"""Ports for the servers the tests start, one helper for the whole suite.

Binding port 0, reading the port and closing the socket (the usual recipe) races: the kernel hands
that port out again, to another pytest-xdist worker doing the same or to any process's outgoing
connection, since port 0 draws from the ephemeral range (32768-60999 by default). A test's server
then fails with EADDRINUSE while another test's server answers on its port, and the test talks to
a stranger (an OpenID provider once refused a service account that way: the provider it reached was
another test's). So the ports here come from outside the ephemeral range, and each worker
(PYTEST_XDIST_WORKER: gw0, gw1, ...; none in the main process) has a slice of its own. Within a
worker they go round, from a random start (a port a previous session left in TIME_WAIT is not the
first one drawn), and each is checked bindable on 127.0.0.1 before it is handed out."""

from __future__ import annotations

import os
import re
import secrets
import socket
import threading
from pathlib import Path

#: Where Linux says which ports it picks for port 0 and outgoing connections.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's own default, where that file is absent.
DEFAULT_EPHEMERAL = (32768, 60999)
#: How many ports the pool holds: the top of the widest gap the ephemeral range leaves (20000-32767
#: by default), above the well-known services' ports low in it (PostgreSQL, Redis, 8080, ...).
POOL_SIZE = 12768
#: The fewest ports a pool may have before it is taken from the default range all the same (where
#: the ephemeral range leaves no room, the bind check is all that guards).
MIN_POOL = 9 * 64
#: Slices of the pool: the main process and up to 8 workers (more, where more workers run).
MIN_SLICES = 9


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range, first and last port included."""
    try:
        low, high = (int(word) for word in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def port_pool(ephemeral: tuple[int, int]) -> range:
    """The ports the tests draw from: outside `ephemeral`, never below 1024."""
    low, high = ephemeral
    widest = max(range(1024, max(low, 1024)), range(max(high + 1, 1024), 65536), key=len)
    if len(widest) < MIN_POOL:
        return range(32768 - POOL_SIZE, 32768)
    return range(max(widest.start, widest.stop - POOL_SIZE), widest.stop)


def worker_slice(worker: str | None, workers: int, pool: range) -> range:
    """The part of `pool` for `worker` (gw0, gw1, ...; None: the main process), of `workers`."""
    found = re.fullmatch(r"gw(\d+)", worker or "")
    index = int(found[1]) + 1 if found else 0
    slices = max(MIN_SLICES, workers + 1)
    size = len(pool) // slices
    start = pool.start + (index % slices) * size
    return range(start, start + size)


def bindable(port: int) -> bool:
    """Whether a socket can bind 127.0.0.1:`port` now (without SO_REUSEADDR: a port in TIME_WAIT
    is not)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class PortSource:
    """Ports from `ports`, round-robin from a random start, each bindable when handed out."""

    def __init__(self, ports: range) -> None:
        self.ports = ports
        self._next = secrets.randbelow(len(ports))
        self._lock = threading.Lock()

    def block(self, size: int) -> int:
        """The first of `size` consecutive ports, all bindable now."""
        with self._lock:
            for _ in range(len(self.ports)):
                offset = self._next % len(self.ports)
                if offset + size > len(self.ports):
                    self._next = 0
                    continue
                base = self.ports[offset]
                self._next = offset + size
                if all(bindable(base + k) for k in range(size)):
                    return base
        raise RuntimeError(f"no {size} free consecutive ports in {self.ports}")


_source: PortSource | None = None
_source_lock = threading.Lock()


def _this_process() -> PortSource:
    """This process's source: its worker's slice, made on first use."""
    global _source  # one round-robin per process
    with _source_lock:
        if _source is None:
            workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
            worker = os.environ.get("PYTEST_XDIST_WORKER")
            _source = PortSource(worker_slice(worker, workers, port_pool(ephemeral_range())))
        return _source


def free_port() -> int:
    """A port for a server to listen on (see above)."""
    return _this_process().block(1)


def free_port_block(size: int) -> int:
    """The first of `size` consecutive ports for servers to listen on (see above)."""
    return _this_process().block(size)
