"""A bare TCP server on loopback, for tests whose server must answer as no well-behaved HTTP server
would (a head that never ends, an answer cut short): `serve` gets each accepted connection, in a
thread of its own, and a client that hangs up ends it quietly."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def raw_server(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """The server's base URL (`http://127.0.0.1:PORT`) while the block runs."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_one(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):  # the client hung up
            serve(connection)

    def accept() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:  # closed: the block has ended
                return
            threading.Thread(target=serve_one, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
