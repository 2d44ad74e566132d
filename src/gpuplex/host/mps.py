"""MPS control daemons, one per GPU that has MPS clients, each with its own pipe and log directories
under the state directory (as NVIDIA's device plugin runs one per resource). The real one is
`nvidia-cuda-mps-control -d`; the simulated one is a stand-in process whose death is a daemon crash.

EXCLUSIVE_PROCESS compute mode is what NVIDIA recommends under MPS (one MPS server per GPU); setting
it is the operator's choice (`nvidia-smi -i N -c EXCLUSIVE_PROCESS`), never done by gpuplex."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.apply.model import MpsDaemonRecord
from gpuplex.errors import HostActionError
from gpuplex.host.children import Children
from gpuplex.host.proc import is_same_process, start_ticks

CONTROL_BINARY = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"


class MpsControl(Protocol):
    def start(
        self, gpu_index: int, gpu_uuid: str, pipe_dir: Path, log_dir: Path
    ) -> MpsDaemonRecord: ...

    def alive(self, daemon: MpsDaemonRecord) -> bool: ...

    def stop(self, daemon: MpsDaemonRecord) -> None: ...


def daemon_env(
    base: dict[str, str], gpu_uuid: str, pipe_dir: Path, log_dir: Path
) -> dict[str, str]:
    return {
        **base,
        "CUDA_VISIBLE_DEVICES": gpu_uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(log_dir),
    }


class NvidiaMps:
    """The NVIDIA MPS control daemon. Health: it answers `get_server_list` on its pipe."""

    def __init__(self, base_env: dict[str, str]) -> None:
        self.base_env = base_env

    def start(
        self, gpu_index: int, gpu_uuid: str, pipe_dir: Path, log_dir: Path
    ) -> MpsDaemonRecord:
        pipe_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        env = daemon_env(self.base_env, gpu_uuid, pipe_dir, log_dir)
        done = subprocess.run(  # noqa: S603 - fixed argv
            [CONTROL_BINARY, "-d"], env=env, capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise HostActionError(
                f"GPU {gpu_index}: {CONTROL_BINARY} -d failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}. Is the NVIDIA driver's MPS installed?"
            )
        pid = _wait_for_pid_file(pipe_dir / PID_FILE, timeout_s=10.0)
        return MpsDaemonRecord(
            gpu_index=gpu_index,
            gpu_uuid=gpu_uuid,
            pid=pid,
            start_ticks=start_ticks(pid),
            started_at_s=now_s(),
            pipe_dir=str(pipe_dir),
            log_dir=str(log_dir),
        )

    def alive(self, daemon: MpsDaemonRecord) -> bool:
        if not is_same_process(daemon.pid, daemon.start_ticks):
            return False
        return self._command(daemon, "get_server_list") is not None

    def stop(self, daemon: MpsDaemonRecord) -> None:
        self._command(daemon, "quit")
        _wait_gone(daemon, timeout_s=10.0)

    def _command(self, daemon: MpsDaemonRecord, command: str) -> str | None:
        env = daemon_env(
            self.base_env, daemon.gpu_uuid, Path(daemon.pipe_dir), Path(daemon.log_dir)
        )
        try:
            done = subprocess.run(  # noqa: S603 - fixed argv
                [CONTROL_BINARY],
                input=command + "\n",
                env=env,
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None


class SimulatedMps:
    """A stand-in control daemon (gpuplex.sim.mps_daemon): a real process that writes the same pid
    file into its pipe directory. Kill it to simulate a daemon crash."""

    def __init__(self, children: Children, base_env: dict[str, str]) -> None:
        self.children = children
        self.base_env = base_env

    def start(
        self, gpu_index: int, gpu_uuid: str, pipe_dir: Path, log_dir: Path
    ) -> MpsDaemonRecord:
        pipe_dir.mkdir(parents=True, exist_ok=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        (pipe_dir / PID_FILE).unlink(missing_ok=True)
        env = daemon_env(self.base_env, gpu_uuid, pipe_dir, log_dir)
        with (log_dir / "control.log").open("ab") as log:
            pid, ticks = self.children.spawn(
                [sys.executable, "-m", "gpuplex.sim.mps_daemon"], env=env, stdout=log, stderr=log
            )
        return MpsDaemonRecord(
            gpu_index=gpu_index,
            gpu_uuid=gpu_uuid,
            pid=pid,
            start_ticks=ticks,
            started_at_s=now_s(),
            pipe_dir=str(pipe_dir),
            log_dir=str(log_dir),
        )

    def alive(self, daemon: MpsDaemonRecord) -> bool:
        if self.children.is_child(daemon.pid):
            return self.children.exit_status(daemon.pid, daemon.start_ticks) is None
        return is_same_process(daemon.pid, daemon.start_ticks)

    def stop(self, daemon: MpsDaemonRecord) -> None:
        if not self.alive(daemon):
            return
        os.kill(daemon.pid, signal.SIGTERM)
        if not self.children.wait(daemon.pid, 5.0):
            _wait_gone(daemon, timeout_s=5.0)
        self.alive(daemon)  # reap


def _wait_for_pid_file(path: Path, timeout_s: float) -> int:
    deadline = now_s() + timeout_s
    while now_s() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit():
            return int(text)
        sleep_s(0.05)
    raise HostActionError(
        f"the MPS control daemon wrote no pid file at {path} within {timeout_s:g} s"
    )


def _wait_gone(daemon: MpsDaemonRecord, timeout_s: float) -> None:
    deadline = now_s() + timeout_s
    while is_same_process(daemon.pid, daemon.start_ticks):
        if now_s() > deadline:
            os.kill(daemon.pid, signal.SIGKILL)
            return
        sleep_s(0.05)
