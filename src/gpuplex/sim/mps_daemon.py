"""A stand-in for `nvidia-cuda-mps-control -d` on machines without a GPU: writes its pid file into
CUDA_MPS_PIPE_DIRECTORY like the real daemon and stays up until told to stop."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType

from gpuplex.settings import environment_value


def main() -> int:
    pipe_dir = environment_value("CUDA_MPS_PIPE_DIRECTORY")
    if not pipe_dir:
        sys.stderr.write("CUDA_MPS_PIPE_DIRECTORY is not set\n")
        return 2
    pid_file = Path(pipe_dir) / "nvidia-cuda-mps-control.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    sys.stdout.write(
        f"simulated MPS control daemon {os.getpid()} for {environment_value('CUDA_VISIBLE_DEVICES')}\n"
    )
    sys.stdout.flush()

    def quit_(signum: int, frame: FrameType | None) -> None:
        pid_file.unlink(missing_ok=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, quit_)
    while True:
        signal.pause()


if __name__ == "__main__":
    raise SystemExit(main())
