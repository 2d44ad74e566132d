"""Where the real control plane's programs come from: kube-apiserver, kube-controller-manager and
kube-scheduler built from the k8s.io/kubernetes Go module (tests/kube_real/controlplane/go.mod) into a
cache directory, and etcd from Debian's `etcd-server` package.

The build runs once per machine (about 7 minutes on 2 cores, 2.2 GB of memory at its peak, 3 GB of Go
build cache); the binaries land in `$GPUPLEX_KUBE_BIN_DIR`, else
`${XDG_CACHE_HOME:-~/.cache}/gpuplex/kube-control-plane/<release>/`, and a later build finds them
there. Go's own caches stay where Go keeps them ($GOMODCACHE, $GOCACHE, under the home directory), so
the next build on the same machine reuses them too.

    python -m tests.kube_real.binaries      build (make kube-control-plane; .ci/run does it)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CONTROL_PLANE_MODULE = Path(__file__).parent / "controlplane"
PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_REQUIRE = re.compile(r"^require k8s\.io/kubernetes (v\S+)$", re.MULTILINE)


def release() -> str:
    """The Kubernetes release the module pins (`v1.36.3`)."""
    found = _REQUIRE.search((CONTROL_PLANE_MODULE / "go.mod").read_text())
    if found is None:
        raise RuntimeError(f"{CONTROL_PLANE_MODULE / 'go.mod'} requires no k8s.io/kubernetes")
    return found.group(1)


def bin_dir() -> Path:
    configured = os.environ.get("GPUPLEX_KUBE_BIN_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpuplex" / "kube-control-plane" / release()


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    controller_manager: Path
    scheduler: Path
    etcd: Path


def find() -> Binaries | str:
    """The four programs, or why they cannot be used (what is missing and how to get it)."""
    directory = bin_dir()
    missing = [name for name in PROGRAMS if not (directory / name).is_file()]
    if missing:
        go = "" if shutil.which("go") else " (and Go is not installed: it needs Go 1.26 or newer)"
        return (
            f"the Kubernetes {release()} control plane is not built: {', '.join(missing)} missing "
            f"in {directory}; `make kube-control-plane` builds it{go}"
        )
    etcd = shutil.which("etcd")
    if etcd is None:
        return "etcd is not installed: apt-get install etcd-server"
    return Binaries(
        directory / "kube-apiserver",
        directory / "kube-controller-manager",
        directory / "kube-scheduler",
        Path(etcd),
    )


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def build() -> Path:
    """Build the three programs into `bin_dir()` unless they are already there."""
    directory = bin_dir()
    if all((directory / name).is_file() for name in PROGRAMS):
        _say(f"kube control plane {release()}: already built in {directory}")
        return directory
    go = shutil.which("go")
    if go is None:
        raise SystemExit("cannot build the Kubernetes control plane: Go is not installed")
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    _say(f"kube control plane {release()}: building {', '.join(PROGRAMS)} (5-10 minutes)")
    # -trimpath and no VCS stamp: the module cache is the source; -ldflags=-s -w: smaller binaries
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
    subprocess.run(  # noqa: S603 - go from PATH, arguments written here
        [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(staging), "tool"],
        cwd=CONTROL_PLANE_MODULE,
        env=env,
        check=True,
    )
    missing = [name for name in PROGRAMS if not (staging / name).is_file()]
    if missing:
        raise SystemExit(f"go build made no {', '.join(missing)} in {staging}")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)  # all three appear at once: an interrupted build leaves none
    _say(f"kube control plane {release()}: built in {directory}")
    return directory


if __name__ == "__main__":
    try:
        build()
    except subprocess.CalledProcessError as error:
        sys.exit(f"go build failed (exit {error.returncode})")
