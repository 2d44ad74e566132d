"""gpuplex's image (the repository's Containerfile) built where no container registry can be reached:
its Python base image made here from Debian's packages, the build done by buildah without a daemon.

1. The base, once per machine (about 2 minutes): mmdebstrap installs a minimal Debian bookworm with
   `python3` (3.11) and `python3-venv` into a tarball, which becomes the image
   `localhost/gpuplex-base/python:3.11-bookworm` (`buildah from scratch`, the tarball added,
   committed). It stands in for the Containerfile's default, Docker Hub's python:3.11-slim-bookworm
   (Python at /usr/bin/python3 instead of /usr/local/bin; the Containerfile's venv follows it).
2. The image (2-3 minutes on 2 cores): `buildah build` of the
   Containerfile on that base, tagged as `gpuplex kube render --self` deploys it
   (registry.local/gpuplex/gpuplex:<version>) and as `localhost/gpuplex-image-test:<digest>`, the
   digest of every file the build reads; a build whose digest is tagged already is skipped. The
   images of earlier digests are removed.

Everything lives under `$GPUPLEX_IMAGE_DIR`, else `${XDG_CACHE_HOME:-~/.cache}/gpuplex/image/`:
the base's tarball, buildah's own store (the vfs driver, so no overlay filesystem is needed, and
never the store of the machine's other containers) and its build caches. Builds run with chroot
isolation (no runc or crun needed), as root. Where the machine's pip trusts a CA bundle of its own
(`$PIP_CERT`, e.g. behind a proxy that re-signs TLS), the build's pip gets it too, mounted read-only
and never copied into the image.

    python -m tests.image.build      build both (make image-local; .ci/run does it)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
BASE_IMAGE = "localhost/gpuplex-base/python:3.11-bookworm"
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv")
TEST_TAG = "localhost/gpuplex-image-test"
#: What the build reads (the rest is kept out by .containerignore).
BUILD_INPUTS = ("Containerfile", ".containerignore", "pyproject.toml", "README.md", "src")
#: Where the build's pip finds the machine's CA bundle (the Containerfile's PIP_CERT argument).
BUILD_CA = "/etc/gpuplex-build-ca.crt"
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def image_dir() -> Path:
    configured = os.environ.get("GPUPLEX_IMAGE_DIR")
    if configured:
        return Path(configured)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "gpuplex" / "image"


def missing_tools(tools: tuple[str, ...] = ("buildah", "mmdebstrap")) -> str | None:
    """Why the image cannot be built (buildah and mmdebstrap) or run (buildah) here, or None."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        return (
            f"no {' or '.join(absent)} (Debian: apt-get install buildah mmdebstrap; "
            "make image-local installs them)"
        )
    return None


def buildah(*args: str) -> list[str]:
    """A buildah command on this module's own store (vfs, chroot isolation)."""
    store = image_dir()
    return [
        shutil.which("buildah") or "buildah",
        "--root",
        str(store / "storage"),
        "--runroot",
        str(store / "run"),
        "--storage-driver",
        "vfs",
        *args,
    ]


def buildah_environment() -> dict[str, str]:
    """chroot isolation; temporary files and RUN cache mounts under the image directory."""
    tmp = image_dir() / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "BUILDAH_ISOLATION": "chroot", "TMPDIR": str(tmp)}


def run_buildah(*args: str, capture: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - buildah, arguments built here
        buildah(*args),
        env=buildah_environment(),
        check=True,
        text=True,
        capture_output=capture,
    )


def image_exists(name: str) -> bool:
    found = subprocess.run(  # noqa: S603 - buildah, arguments built here
        buildah("inspect", "--type", "image", name),
        env=buildah_environment(),
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


def source_digest() -> str:
    """The first 16 hex digits of a SHA-256 over every file the build reads, path and content."""
    digest = hashlib.sha256()
    for name in BUILD_INPUTS:
        path = ROOT / name
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if not file.is_file() or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            digest.update(file.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def current_tag() -> str:
    """The tag of the image built from the tree as it is now."""
    return f"{TEST_TAG}:{source_digest()}"


def _say(text: str) -> None:
    print(f"image: {text}", flush=True)  # noqa: T201 - the progress of a long build


def build_base() -> None:
    """The Debian base image, unless the store has it."""
    if image_exists(BASE_IMAGE):
        _say(f"{BASE_IMAGE} is there")
        return
    tarball = image_dir() / f"{DEBIAN_SUITE}-python3.tar"
    if not tarball.exists():
        started = time.monotonic()
        _say(f"mmdebstrap {DEBIAN_SUITE} with {', '.join(BASE_PACKAGES)} into {tarball}")
        partial = tarball.with_suffix(".partial.tar")
        subprocess.run(  # noqa: S603 - mmdebstrap, arguments built here
            [
                shutil.which("mmdebstrap") or "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                DEBIAN_SUITE,
                str(partial),
            ],
            check=True,
        )
        partial.rename(tarball)
        _say(f"Debian root filesystem made in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    container = run_buildah("from", "scratch", capture=True).stdout.strip()
    try:
        run_buildah("add", "--quiet", container, str(tarball), "/")
        run_buildah(
            "config",
            "--env",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--cmd",
            '["python3"]',
            container,
        )
        run_buildah("commit", "--quiet", container, BASE_IMAGE, capture=True)
    finally:
        run_buildah("rm", container, capture=True)
    _say(f"{BASE_IMAGE} committed in {time.monotonic() - started:.0f} s")


def _ca_arguments() -> list[str]:
    bundle = Path(os.environ.get("PIP_CERT") or SYSTEM_CA)
    if not bundle.is_file():
        return []
    return ["--build-arg", f"PIP_CERT={BUILD_CA}", "--volume", f"{bundle}:{BUILD_CA}:ro"]


def build_image() -> str:
    """The image of the tree as it is now, unless built already; returns its test tag."""
    from gpuplex.kube.self_options import DEFAULT_IMAGE

    tag = current_tag()
    if image_exists(tag):
        _say(f"{tag} is there (built from this tree)")
        return tag
    started = time.monotonic()
    run_buildah(
        "build",
        "--file",
        str(CONTAINERFILE),
        "--build-arg",
        f"PYTHON_IMAGE={BASE_IMAGE}",
        *_ca_arguments(),
        "--tag",
        DEFAULT_IMAGE,
        "--tag",
        tag,
        str(ROOT),
    )
    _say(f"{DEFAULT_IMAGE} ({tag}) built in {time.monotonic() - started:.0f} s")
    _forget_older_builds(tag)
    return tag


def _forget_older_builds(keep: str) -> None:
    """Untag the images of other digests and remove every image no name holds any more."""
    listed = run_buildah("images", "--format", "{{.Name}}:{{.Tag}}", capture=True).stdout
    for name in listed.split():
        if name.startswith(f"{TEST_TAG}:") and name != keep:
            run_buildah("rmi", name, capture=True)
    run_buildah("rmi", "--prune", capture=True)


if __name__ == "__main__":
    missing = missing_tools()
    if missing:
        sys.exit(f"image: {missing}")
    try:
        build_base()
        build_image()
    except subprocess.CalledProcessError as error:
        sys.exit(f"image: {error.cmd[0]} failed (exit {error.returncode})")
