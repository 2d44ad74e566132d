"""A real vLLM OpenAI server on CPU, for tests and benchmarks: the tiny model it serves, the command
and environment that start it, and a handle that waits for it and stops it.

Runs from the project's venv; vLLM, torch and transformers live only in the vLLM venv
(tests/vllm_real/install.py, `make vllm`), which the processes started here use.

    model = build_model(tmp / "model")                 # tests/vllm_real/model_builder.py, ~15 s
    server = start_vllm(model, tmp / "vllm.log")       # /health 200 after 50-75 s on 2 cores
    ... server.url, server.served_name, server.loras ...
    server.stop()

`vllm_command` and `vllm_env` are public on their own so that other code can run the same server as
something else's child (a tenant's replica under the host runtime, for instance). The facts behind
the flags are in shared/reference/vllm-cpu.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.e2e.gateway.stack import free_port
from tests.vllm_real import install

BUILDER = Path(__file__).resolve().parent / "model_builder.py"
#: `vllm serve`'s arguments; the `vllm` console script fails (the distribution is `vllm-cpu`).
ENTRY_MODULE = "vllm.entrypoints.launchers.api_server.entry"
BASE_NAME = "tiny-llama"
MAX_MODEL_LEN = 512
#: The builder's adapters are rank 8; two of them may run in one batch.
MAX_LORA_RANK = 8
MAX_LORAS = 2
START_TIMEOUT_S = 600.0
#: vLLM's own settings: offline (nothing from a model hub), no usage reports, 1 GiB of KV cache
#: (about 524k tokens of this model), LoRA adapters loadable at run time (`/v1/load_lora_adapter`).
VLLM_ENVIRONMENT = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
    "TOKENIZERS_PARALLELISM": "false",
    # vLLM pins its worker's threads to CPU 0 of a 2-core machine and keeps CPU 1 for itself: two
    # instances (the suite's and one `gpuplex up` runs) would then share one core. Unpinned, the
    # kernel spreads them (a start took over 4 minutes pinned beside another instance).
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}
#: What the parent's environment must not pass on: the project venv's paths.
NOT_INHERITED = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")


def missing() -> str | None:
    """Why vLLM cannot run here (with what to do), or None."""
    if install.installed():
        return None
    return (
        f"vLLM is not installed (no {install.python()}): run `make vllm` once "
        f"(vllm-cpu {install.VLLM_VERSION} in a venv of its own, about 6 minutes and 6.3 GB)"
    )


@dataclass(frozen=True)
class ModelFiles:
    """What model_builder.py wrote: the base model's folder (weights, tokenizer, chat template) and
    each LoRA adapter's folder by name."""

    root: Path
    base: Path
    loras: dict[str, Path]


def vllm_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a vLLM process (or the model builder): `base` (default: this process's
    environment) less the project venv's Python paths, plus VLLM_ENVIRONMENT."""
    inherited = dict(os.environ if base is None else base)
    for name in NOT_INHERITED:
        inherited.pop(name, None)
    return inherited | VLLM_ENVIRONMENT


def build_model(dest: Path, timeout_s: float = 300) -> ModelFiles:
    """Make the tiny model and its adapters `lora-a`, `lora-b` in `dest` (model_builder.py, with
    the vLLM venv's Python). Raises RuntimeError with the builder's output when it fails."""
    dest.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(  # noqa: S603 - our own script under the vLLM venv's Python
        [str(install.python()), str(BUILDER), str(dest)],
        capture_output=True,
        text=True,
        env=vllm_env(),
        timeout=timeout_s,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(
            f"model_builder.py exited with {done.returncode}:\n{_tail(done.stdout + done.stderr)}"
        )
    written = json.loads(lines[-1])
    loras = {name: Path(path) for name, path in written["loras"].items()}
    return ModelFiles(root=dest, base=Path(written["base"]), loras=loras)


def vllm_command(
    model_dir: Path,
    port: int,
    served_name: str = BASE_NAME,
    lora_modules: Mapping[str, Path] | None = None,
    extra_args: Iterable[str] = (),
    host: str = "127.0.0.1",
) -> list[str]:
    """The command line of a vLLM OpenAI server on CPU serving `model_dir` as `served_name` on
    host:port, and each of `lora_modules` (name: adapter folder) as a model of its own: float32,
    a 512-token context, no graph capture (eager: starts faster), `x-request-id` echoed."""
    command = [str(install.python()), "-m", ENTRY_MODULE, "--model", str(model_dir)]
    command += ["--served-model-name", served_name, "--host", host, "--port", str(port)]
    command += ["--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager"]
    command += ["--enable-request-id-headers"]
    if lora_modules:
        command += ["--enable-lora", "--max-lora-rank", str(MAX_LORA_RANK)]
        command += ["--max-loras", str(MAX_LORAS), "--lora-modules"]
        command += [f"{name}={path}" for name, path in lora_modules.items()]
    command += list(extra_args)
    return command


@dataclass
class VllmServer:
    """One running vLLM server (the leader of a process group of its own: API server, engine core,
    worker). `loras` are the adapter names it serves beside `served_name`."""

    url: str
    served_name: str
    loras: tuple[str, ...]
    model_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path
    started_s: float = field(default=0.0)  # seconds from start to /health 200

    def log_tail(self, lines: int = 40) -> str:
        try:
            return _tail(self.log_path.read_text(errors="replace"), lines)
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM to the whole group, wait (it exits within about 3 s), SIGKILL after `timeout_s`;
        the exit code (0 when it shut down cleanly)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        return self.process.returncode


def start_vllm(
    model: ModelFiles,
    log_path: Path,
    *,
    served_name: str = BASE_NAME,
    loras: Iterable[str] | None = None,
    port: int | None = None,
    extra_args: Iterable[str] = (),
    environment: Mapping[str, str] | None = None,
    timeout_s: float = START_TIMEOUT_S,
    say: Callable[[str], None] | None = None,
) -> VllmServer:
    """Start vLLM serving `model` as `served_name` and the adapters named in `loras` (default: all
    of the model's), output to `log_path`, `environment` over `vllm_env()`'s, and wait for /health 200, saying how long it has waited
    every 15 s (`say`: default to stderr). Raises RuntimeError with the end of its log when it exits
    first or is not up in `timeout_s` (stopping it)."""
    say = say or _to_stderr
    names = tuple(model.loras if loras is None else loras)
    port = port or free_port()
    command = vllm_command(
        model.base, port, served_name, {name: model.loras[name] for name in names}, extra_args
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(  # noqa: S603 - the vLLM venv's Python, arguments built here
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=vllm_env() | dict(environment or {}),
            start_new_session=True,
        )
    server = VllmServer(
        f"http://127.0.0.1:{port}", served_name, names, model.base, process, log_path
    )
    started = time.monotonic()
    next_word = started + 15
    say(f"vllm: starting on port {port} (pid {process.pid}, log {log_path})")
    while True:
        waited = time.monotonic() - started
        if process.poll() is not None:
            raise RuntimeError(
                f"vLLM exited with {process.returncode} after {waited:.0f} s; its log ends:\n"
                f"{server.log_tail()}"
            )
        if waited > timeout_s:
            server.stop()
            raise RuntimeError(
                f"vLLM did not answer /health within {timeout_s:.0f} s; its log ends:\n"
                f"{server.log_tail()}"
            )
        try:
            reply = httpx.get(f"{server.url}/health", timeout=2)
            if reply.status_code == 200 and process.poll() is None:  # ours, not a stranger
                server.started_s = waited
                say(f"vllm: up in {waited:.0f} s at {server.url}")
                return server
        except httpx.HTTPError:
            pass
        if time.monotonic() >= next_word:
            say(f"vllm: waiting for /health, {waited:.0f} s so far")
            next_word += 15
        time.sleep(0.5)


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # noqa: T201 - progress of a long start


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
