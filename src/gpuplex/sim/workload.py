"""A stand-in tenant workload for tests and demos: a real process that serves `GET /health`, holds
simulated GPU memory (reported to the simulated driver), and can misbehave on purpose: crash, leak
GPU memory, or allocate host memory until its cgroup stops it. Like a training job it keeps its GPUs
busy the whole time it runs (the simulated driver reads it as 100 % utilization).

    python -m gpuplex.sim.workload --port 8000 [--gpu-memory-mib 4096] [--crash-after-s 1]
        [--exit-code 3] [--host-memory-mib 512]

`POST /sim/gpu-memory?mib=N` changes the simulated GPU memory it holds (a leak, on demand)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from gpuplex.clock import monotonic_s, sleep_s
from gpuplex.settings import environment_value


class SimulatedGpuMemory:
    """Writes one `<device> <MiB> <busy seconds>` line per GPU the process was given to
    <GPUPLEX_SIM_DIR>/memory/<pid>, as the simulated driver expects. A process on several GPUs
    holds its memory spread evenly over them (as a model split across GPUs does) and works them
    all together: each line has the process's busy seconds so far."""

    def __init__(self) -> None:
        sim_dir = environment_value("GPUPLEX_SIM_DIR")
        devices = (environment_value("GPUPLEX_DEVICE_UUIDS") or "").split(",")
        self.report = Path(sim_dir) / "memory" / str(os.getpid()) if sim_dir else None
        self.devices = [device for device in devices if device]
        self.mib = 0
        self.busy_s = 0.0
        self._lock = threading.Lock()

    def hold(self, mib: int) -> None:
        with self._lock:
            self.mib = mib
            self._write()

    def busy_for(self, busy_s: float) -> None:
        """The seconds the process has kept its GPUs busy since it started."""
        with self._lock:
            self.busy_s = busy_s
            self._write()

    def report_busy(self, busy_s: Callable[[], float], every_s: float = 1.0) -> None:
        """From now on, report `busy_s()` every `every_s` seconds (in a daemon thread)."""

        def keep_reporting() -> None:
            while True:
                self.busy_for(busy_s())
                sleep_s(every_s)

        threading.Thread(target=keep_reporting, name="sim-gpu-busy", daemon=True).start()

    def _write(self) -> None:
        if self.report is None or not self.devices:
            return
        tmp = self.report.with_suffix(".tmp")
        lines = [
            f"{device} {mib} {self.busy_s:.3f}\n"
            for device, mib in zip(self.devices, spread(self.mib, len(self.devices)), strict=True)
        ]
        try:
            tmp.write_text("".join(lines))
            os.replace(tmp, self.report)
        except OSError as error:  # not allowed, or no simulated driver there yet
            sys.stderr.write(f"cannot report simulated GPU memory: {error}\n")


def spread(mib: int, devices: int) -> list[int]:
    """`mib` over `devices` GPUs as evenly as whole MiB allow (the first ones take the rest)."""
    share, rest = divmod(mib, devices)
    return [share + (1 if k < rest else 0) for k in range(devices)]


def _handler(memory: SimulatedGpuMemory) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if urlparse(self.path).path == "/health":
                self._reply(200, b"ok\n")
            else:
                self._reply(404, b"not found\n")

        def do_POST(self) -> None:
            url = urlparse(self.path)
            if url.path != "/sim/gpu-memory":
                self._reply(404, b"not found\n")
                return
            mib = int(parse_qs(url.query).get("mib", ["0"])[0])
            memory.hold(mib)
            self._reply(200, f"holding {mib} MiB\n".encode())

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def _hog_host_memory(mib: int) -> None:
    chunks = []
    for _ in range(mib // 16):
        chunks.append(bytearray(16 * 1024 * 1024))  # zero-filled: every page is touched
        sleep_s(0.01)
    sys.stdout.write(f"holding {len(chunks) * 16} MiB of host memory\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuplex.sim.workload")
    parser.add_argument("--port", type=int)
    parser.add_argument("--gpu-memory-mib", type=int, default=0)
    parser.add_argument("--crash-after-s", type=float)
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--host-memory-mib", type=int, default=0)
    args = parser.parse_args(argv)
    memory = SimulatedGpuMemory()
    memory.hold(args.gpu_memory_mib)
    started_s = monotonic_s()
    memory.report_busy(lambda: monotonic_s() - started_s)  # busy all the time it runs
    sys.stdout.write(f"sim workload {os.getpid()} up on port {args.port}\n")
    sys.stdout.flush()
    if args.host_memory_mib:
        threading.Thread(target=_hog_host_memory, args=(args.host_memory_mib,), daemon=True).start()
    if args.crash_after_s is not None:
        sleep_s(args.crash_after_s)
        sys.stderr.write(f"crashing on purpose with exit code {args.exit_code}\n")
        return int(args.exit_code)
    if args.port is None:
        while True:
            sleep_s(3600)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(memory))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
