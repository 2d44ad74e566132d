"""The tenant program of `gpuplex bench isolation`: an inference-style loop (a chain of dense layers,
as in a transformer block's MLP) at a fixed batch size, timing every step.

    python -m gpuplex.isolation_bench.loop --backend torch --batch 32 --width 4096 --layers 8 \\
        --go /tmp/scenario.go --go-wait-s 330 --seconds 20 --out /tmp/t1.json

It warms up, says so by making `--out` with the suffix `.ready`, waits for the harness to write
`--go` (the wall-clock time to start: the harness writes it once every tenant of the scenario is
ready, so that all of them measure over the same window however long each took to start; after
`--go-wait-s` without it the harness is gone, and the loop ends), steps for `--seconds`, and
writes one JSON object to `--out`: the step latencies and the window actually measured.
`--backend torch` runs on the CUDA device the host runtime gave it (CUDA_VISIBLE_DEVICES or its
MPS daemon) and synchronises after every step; `--backend numpy` runs
the same chain on the CPU, so the harness itself can be tested where there is no GPU."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuplex.clock import now_s, sleep_s
from gpuplex.settings import environment_value

WARMUP_STEPS = 5


def keep_scale(width: int) -> float:
    """Keeps activations near unit size through the chain (He scaling), so no step slows down on
    denormal numbers as they shrink."""
    return float((2.0 / width) ** 0.5)


def numpy_step(batch: int, width: int, layers: int) -> Callable[[], None]:
    import numpy as np

    generator = np.random.default_rng(0)
    weights = [generator.standard_normal((width, width), dtype=np.float32) for _ in range(layers)]
    inputs = generator.standard_normal((batch, width), dtype=np.float32)
    scale = np.float32(keep_scale(width))

    def step() -> None:
        x = inputs
        for weight in weights:
            x = np.maximum(x @ weight, 0.0) * scale
        float(x[0, 0])  # the result is needed, as a reply would be

    return step


def torch_step(batch: int, width: int, layers: int) -> Callable[[], None]:
    try:
        import torch  # on the GPU machine only: not a dependency of gpuplex
    except ImportError:
        raise SystemExit(
            "the torch loop needs PyTorch with CUDA (pip install torch), or run --backend numpy"
        ) from None

    if not torch.cuda.is_available():
        raise SystemExit("torch sees no CUDA device: run with --backend numpy, or on a GPU")
    device = torch.device("cuda")
    generator = torch.Generator(device=device).manual_seed(0)
    weights = [
        torch.randn(width, width, device=device, dtype=torch.bfloat16, generator=generator)
        for _ in range(layers)
    ]
    inputs = torch.randn(batch, width, device=device, dtype=torch.bfloat16, generator=generator)
    scale = keep_scale(width)

    def step() -> None:
        with torch.inference_mode():
            x = inputs
            for weight in weights:
                x = torch.relu(x @ weight) * scale
        torch.cuda.synchronize()

    return step


BACKENDS = {"numpy": numpy_step, "torch": torch_step}


def ready_path(out: Path) -> Path:
    """Where the loop says it warmed up: beside its result, which the harness knows."""
    return out.with_suffix(".ready")


def wait_for_go(go: Path, wait_s: float, poll_s: float = 0.01) -> float:
    """The start time the harness wrote to `go` (wall clock), once it exists; SystemExit after
    `wait_s` without it (the harness was killed: nobody will write it)."""
    give_up_at = time.monotonic() + wait_s
    while True:
        try:
            return float(go.read_text(encoding="ascii"))
        except FileNotFoundError:
            if time.monotonic() > give_up_at:
                raise SystemExit(
                    f"no start time in {go} after {wait_s:g} s: the harness is gone"
                ) from None
            sleep_s(poll_s)


def measure(
    step: Callable[[], None], ready: Path, go: Path, go_wait_s: float, seconds: float
) -> dict[str, object]:
    for _ in range(WARMUP_STEPS):
        step()
    ready.touch()
    start_at = wait_for_go(go, go_wait_s)
    late_s = max(0.0, now_s() - start_at)
    while now_s() < start_at:
        sleep_s(min(0.01, max(0.0, start_at - now_s())))
    latencies_s: list[float] = []
    began = time.perf_counter()
    began_wall = now_s()
    end = began + seconds
    while (now := time.perf_counter()) < end:
        step()
        latencies_s.append(time.perf_counter() - now)
    return {
        "started_at": began_wall,
        "window_s": time.perf_counter() - began,
        "late_s": late_s,  # how long after the start time the loop saw it (0: on time)
        "latencies_s": latencies_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuplex.isolation_bench.loop")
    parser.add_argument("--backend", choices=sorted(BACKENDS), required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--go-wait-s", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    step = BACKENDS[args.backend](args.batch, args.width, args.layers)
    result = measure(step, ready_path(args.out), args.go, args.go_wait_s, args.seconds)
    result |= {
        "backend": args.backend,
        "batch": args.batch,
        "width": args.width,
        "layers": args.layers,
        "pid": os.getpid(),
        "mps_thread_percent": environment_value("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
    }
    partial = args.out.with_suffix(".partial")
    partial.write_text(json.dumps(result))
    partial.replace(args.out)  # the harness sees a whole file or none
    return 0


if __name__ == "__main__":
    sys.exit(main())
