"""Simulated model servers for tests: `python -m gpuplex.cli.sim model` as a subprocess, or the ASGI
app under uvicorn in a thread of the test's own process (where the test can look at its state)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from gpuplex.sim.model_server import ModelServer, ModelServerSettings, make_app
from tests.integration.host.hostrun import healthy
from tests.ports import free_port as free_port  # imported from here by other tests


def wait_healthy(port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}")
        if healthy(port) and (process is None or process.poll() is None):
            return
        time.sleep(0.02)
    raise AssertionError(f"port {port} did not become healthy")


def start_cli(log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "gpuplex.cli.sim", "model", "--port", str(port), *args]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)  # noqa: S603 - our own CLI
    try:
        wait_healthy(port, process)
    except BaseException as error:
        process.kill()
        process.wait()
        if isinstance(error, AssertionError):
            raise AssertionError(f"{error}\n{log.read_text()}") from None
        raise
    return process, f"http://127.0.0.1:{port}"


@contextmanager
def serving(settings: ModelServerSettings) -> Iterator[tuple[str, ModelServer]]:
    """The app under uvicorn (uvloop, httptools, as the CLI runs it) in a thread of this process."""
    app = make_app(settings)
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        ws="none",
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_healthy(port)
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(10)
