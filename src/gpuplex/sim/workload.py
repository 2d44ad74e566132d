"""A stand-in tenant workload for tests and demos: a real process that serves `GET /health`, holds
simulated GPU memory (reported to the simulated driver), and can misbehave on purpose: crash, leak
GPU memory, or allocate host memory until its cgroup stops it.

    python -m gpuplex.sim.workload --port 8000 [--gpu-memory-mib 4096] [--crash-after-s 1]
        [--exit-code 3] [--host-memory-mib 512]

`POST /sim/gpu-memory?mib=N` changes the simulated GPU memory it holds (a leak, on demand)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from gpuplex.clock import sleep_s
from gpuplex.settings import environment_value


class SimulatedGpuMemory:
    """Writes `<device> <MiB>` to <GPUPLEX_SIM_DIR>/memory/<pid>, as the simulated driver expects."""

    def __init__(self) -> None:
        sim_dir = environment_value("GPUPLEX_SIM_DIR")
        devices = (environment_value("GPUPLEX_DEVICE_UUIDS") or "").split(",")
        self.report = Path(sim_dir) / "memory" / str(os.getpid()) if sim_dir else None
        self.device = devices[0]

    def hold(self, mib: int) -> None:
        if self.report is None or not self.device:
            return
        tmp = self.report.with_suffix(".tmp")
        try:
            tmp.write_text(f"{self.device} {mib}\n")
            os.replace(tmp, self.report)
        except PermissionError:
            sys.stderr.write(f"cannot report simulated GPU memory in {self.report.parent}\n")


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
