"""Where the real control plane's programs come from: kube-apiserver, kube-controller-manager and
kube-scheduler built from the k8s.io/kubernetes Go module (tests/kube_real/controlplane/go.mod) into a
cache directory, and etcd from Debian's `etcd-server` package; and the Kueue manager, built from the
sigs.k8s.io/kueue module (tests/kube_real/kueue/go.mod), with the webhook configurations of the same
release (config/components/webhook/manifests.yaml, copied from the module beside the binary).

The control plane's build runs once per machine (about 7 minutes on 2 cores, 2.2 GB of memory at its
peak, 3 GB of Go build cache); the binaries land in `$GPUPLEX_KUBE_BIN_DIR`, else
`${XDG_CACHE_HOME:-~/.cache}/gpuplex/kube-control-plane/<release>/`, and a later build finds them
there. They carry the release's version stamps (`-X k8s.io/component-base/version.gitVersion=...`, as
Kubernetes' own build sets them): Kueue refuses an API server that reports `v0.0.0-master`, so an
unstamped earlier build counts as not built. Kueue's build (about 8 minutes of CPU, 12 minutes on 2
cores shared with other work; 1.7 GB of memory at its peak, about 1.4 GB more Go build cache, an
84 MB binary) lands in `$GPUPLEX_KUEUE_BIN_DIR`, else `${XDG_CACHE_HOME:-~/.cache}/gpuplex/kueue/
<version>/`. Go's own caches stay where Go keeps them ($GOMODCACHE, $GOCACHE, under the home
directory), so the next build on the same machine reuses them (a relink takes under a minute).

    python -m tests.kube_real.binaries      build both (make kube-control-plane; .ci/run does it)
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
KUEUE_MODULE = Path(__file__).parent / "kueue"
KUEUE_PATH = "sigs.k8s.io/kueue"
#: The webhook configurations of the Kueue release, copied out of its module at build time.
KUEUE_WEBHOOKS = "kueue-webhooks.yaml"


def _required(module: Path, path: str) -> str:
    pattern = rf"^(?:require )?\s*{re.escape(path)} (v\S+)(?: // indirect)?$"
    found = re.search(pattern, (module / "go.mod").read_text(), re.M)
    if found is None:
        raise RuntimeError(f"{module / 'go.mod'} requires no {path}")
    return found.group(1)


def release() -> str:
    """The Kubernetes release the module pins (`v1.36.3`)."""
    return _required(CONTROL_PLANE_MODULE, "k8s.io/kubernetes")


def kueue_version() -> str:
    """The Kueue release the module pins (`v0.17.0`)."""
    return _required(KUEUE_MODULE, KUEUE_PATH)


def _cache(variable: str, name: str, version: str) -> Path:
    configured = os.environ.get(variable)
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpuplex" / name / version


def bin_dir() -> Path:
    return _cache("GPUPLEX_KUBE_BIN_DIR", "kube-control-plane", release())


def kueue_dir() -> Path:
    return _cache("GPUPLEX_KUEUE_BIN_DIR", "kueue", kueue_version())


@dataclass(frozen=True)
class Binaries:
    apiserver: Path
    controller_manager: Path
    scheduler: Path
    etcd: Path


def _version_stamps(version: str) -> tuple[str, ...]:
    """The -X settings the Kubernetes release build makes, so that the API server reports its
    release (`/version`) instead of `v0.0.0-master`: clients that parse it (Kueue) need them."""
    major, minor = version.removeprefix("v").split(".")[:2]
    values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean"}
    return tuple(
        f"{package}.{name}={value}"
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
        for name, value in values.items()
    )


def _stamped(apiserver: Path) -> bool:
    """Whether the API server reports the release it was built from (older builds did not)."""
    reply = subprocess.run(  # noqa: S603 - our own binary
        [str(apiserver), "--version"], capture_output=True, text=True, check=False, timeout=60
    )
    return reply.stdout.split() == ["Kubernetes", release()]


def _control_plane_missing(directory: Path) -> str:
    """What keeps the built control plane from being used: missing programs, or an API server
    built without the release stamp; "" when nothing does."""
    missing = [name for name in PROGRAMS if not (directory / name).is_file()]
    if missing:
        return f"{', '.join(missing)} missing in {directory}"
    if not _stamped(directory / "kube-apiserver"):
        return f"{directory / 'kube-apiserver'} was built without its release's version stamp"
    return ""


def find() -> Binaries | str:
    """The four programs, or why they cannot be used (what is missing and how to get it)."""
    directory = bin_dir()
    missing = _control_plane_missing(directory)
    if missing:
        go = "" if shutil.which("go") else " (and Go is not installed: it needs Go 1.26 or newer)"
        return (
            f"the Kubernetes {release()} control plane is not built: {missing}; "
            f"`make kube-control-plane` builds it{go}"
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


@dataclass(frozen=True)
class Kueue:
    manager: Path
    #: Kueue's own Mutating- and ValidatingWebhookConfiguration (service references, no CA).
    webhooks: Path


def find_kueue() -> Kueue | str:
    """The Kueue manager and its webhook configurations, or why they cannot be used."""
    directory = kueue_dir()
    missing = [name for name in ("kueue", KUEUE_WEBHOOKS) if not (directory / name).is_file()]
    if missing:
        go = "" if shutil.which("go") else " (and Go is not installed: it needs Go 1.26 or newer)"
        return (
            f"Kueue {kueue_version()} is not built: {', '.join(missing)} missing in {directory}; "
            f"`make kube-control-plane` builds it{go}"
        )
    return Kueue(directory / "kueue", directory / KUEUE_WEBHOOKS)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _go_build(module: Path, staging: Path, stamps: tuple[str, ...]) -> None:
    """`go build -o staging tool`: every program the module's `tool` lines name, with the
    `-X package.variable=value` stamps given."""
    go = shutil.which("go")
    if go is None:
        raise SystemExit(f"cannot build {module.name}: Go is not installed")
    # -trimpath and no VCS stamp: the module cache is the source; -ldflags=-s -w: smaller binaries
    env = {**os.environ, "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}
    ldflags = " ".join(["-s", "-w", *(f"-X {stamp}" for stamp in stamps)])
    subprocess.run(  # noqa: S603 - go from PATH, arguments written here
        [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(staging), "tool"],
        cwd=module,
        env=env,
        check=True,
    )


def _staged(directory: Path) -> Path:
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def _publish(staging: Path, directory: Path, wanted: tuple[str, ...]) -> None:
    missing = [name for name in wanted if not (staging / name).is_file()]
    if missing:
        raise SystemExit(f"go build made no {', '.join(missing)} in {staging}")
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)  # all appear at once: an interrupted build leaves none


def build() -> Path:
    """Build the three programs into `bin_dir()` unless they are already there."""
    directory = bin_dir()
    if not _control_plane_missing(directory):
        _say(f"kube control plane {release()}: already built in {directory}")
        return directory
    staging = _staged(directory)
    _say(f"kube control plane {release()}: building {', '.join(PROGRAMS)} (5-10 minutes)")
    _go_build(CONTROL_PLANE_MODULE, staging, _version_stamps(release()))
    _publish(staging, directory, PROGRAMS)
    _say(f"kube control plane {release()}: built in {directory}")
    return directory


def build_kueue() -> Path:
    """Build the Kueue manager into `kueue_dir()`, with its release's webhook configurations,
    unless they are already there."""
    directory = kueue_dir()
    if not isinstance(find_kueue(), str):
        _say(f"kueue {kueue_version()}: already built in {directory}")
        return directory
    staging = _staged(directory)
    _say(f"kueue {kueue_version()}: building the manager (3-6 minutes)")
    _go_build(KUEUE_MODULE, staging, (f"{KUEUE_PATH}/pkg/version.GitVersion={kueue_version()}",))
    source = subprocess.run(  # noqa: S603 - go from PATH, arguments written here
        [shutil.which("go") or "go", "list", "-m", "-f", "{{.Dir}}", KUEUE_PATH],
        cwd=KUEUE_MODULE,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shutil.copyfile(
        Path(source) / "config" / "components" / "webhook" / "manifests.yaml",
        staging / KUEUE_WEBHOOKS,
    )
    _publish(staging, directory, ("kueue", KUEUE_WEBHOOKS))
    _say(f"kueue {kueue_version()}: built in {directory}")
    return directory


if __name__ == "__main__":
    try:
        build()
        build_kueue()
    except subprocess.CalledProcessError as error:
        sys.exit(f"go build failed (exit {error.returncode})")
