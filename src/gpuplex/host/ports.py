"""Is a TCP port free to listen on: asked before starting something that will listen there, so
that a port held by someone else is said plainly instead of showing up as a crash loop."""

from __future__ import annotations

import socket


def port_taken(host: str, port: int) -> bool:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        return False  # a name that does not resolve: the listener itself will say so
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError:
            return True
    return False
