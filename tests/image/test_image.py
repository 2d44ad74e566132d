"""gpuplex's image: the Containerfile read as text (two stages, a final stage with nothing but the
venv and an unprivileged user, the `gpuplex` entry point, the tag `--self` deploys), and the image
that `make image-local` built from the current tree run with buildah (the CLI answers, as the user
the pods run as, with every option the rendered Deployments pass; no compiler inside).

The second part skips, saying why, where buildah or the image is missing, unless
GPUPLEX_REQUIRE_IMAGE=1 (CI), where it fails instead."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuplex import __version__
from gpuplex.kube.self_manifests import SelfOptions, self_manifests
from gpuplex.kube.self_options import DEFAULT_IMAGE
from gpuplex.kube.self_pods import GATEWAY, RUN_AS, SERVER
from gpuplex.specfile import load_spec_file
from tests.image import build

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "kubernetes-cluster.yaml"
VENV = "/opt/gpuplex"
COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "make", "ld")
#: Package managers and what they would bring: none belongs in the final stage.
INSTALLERS = re.compile(
    r"\b(apt-get|apt|apk|dnf|yum|microdnf|pip3?|uv|conda)\b|\bpython3? -m pip\b"
)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def _instructions(text: str) -> list[Instruction]:
    """The Containerfile's instructions, continuation lines joined and comments left out."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        out.append(Instruction(keyword.upper(), arguments.strip()))
    return out


def _stages() -> tuple[list[Instruction], list[list[Instruction]]]:
    """The global ARGs before the first FROM, and each stage from its FROM on."""
    instructions = _instructions((ROOT / "Containerfile").read_text())
    first = next(i for i, step in enumerate(instructions) if step.keyword == "FROM")
    stages: list[list[Instruction]] = []
    for step in instructions[first:]:
        if step.keyword == "FROM":
            stages.append([])
        stages[-1].append(step)
    return instructions[:first], stages


def _arg_defaults(args: list[Instruction]) -> dict[str, str]:
    defaults = {}
    for step in args:
        if step.keyword == "ARG":
            name, _, default = step.arguments.partition("=")
            defaults[name] = default
    return defaults


def test_the_build_is_multi_stage_on_the_public_python_image_by_default() -> None:
    global_args, stages = _stages()
    defaults = _arg_defaults(global_args)
    assert defaults["PYTHON_IMAGE"] == "docker.io/library/python:3.11-slim-bookworm"
    assert defaults["BUILD_IMAGE"] == defaults["RUNTIME_IMAGE"] == "${PYTHON_IMAGE}"
    assert [stage[0].arguments for stage in stages] == [
        "${BUILD_IMAGE} AS build",
        "${RUNTIME_IMAGE}",
    ]
    build_runs = " ".join(step.arguments for step in stages[0] if step.keyword == "RUN")
    assert "pip wheel --no-deps" in build_runs  # the wheel is built in the build stage
    assert "--only-binary=:all:" in build_runs  # and no dependency is compiled


def test_the_final_stage_holds_the_venv_a_numeric_non_root_user_and_no_build_tools() -> None:
    final = _stages()[1][-1]
    users = [step.arguments for step in final if step.keyword == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    assert uid.isdigit(), f"USER {users[0]}: the user is not a number"
    assert gid.isdigit(), f"USER {users[0]}: the group is not a number"
    assert int(uid) != 0
    # the pods run as RUN_AS (runAsUser and runAsGroup): the image's user is the same one
    assert (int(uid), int(gid)) == (RUN_AS, RUN_AS)
    copies = [step.arguments for step in final if step.keyword == "COPY"]
    assert copies == [f"--from=build {VENV} {VENV}"]
    for step in final:
        if step.keyword == "RUN":
            assert not INSTALLERS.search(step.arguments), f"the final stage installs: {step}"
            words = set(re.split(r"[\s;&|]+", step.arguments))
            assert not words & set(COMPILERS), f"the final stage runs a build tool: {step}"


def test_the_entry_point_is_the_gpuplex_cli_on_the_path_the_pods_call_it_by() -> None:
    final = _stages()[1][-1]
    entrypoints = [step.arguments for step in final if step.keyword == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoints] == [["gpuplex"]]
    env = " ".join(step.arguments for step in final if step.keyword == "ENV")
    assert f"PATH={VENV}/bin:$PATH" in env.split()
    # the rendered Deployments replace the entry point with `command: [gpuplex, ...]`
    for manifest in self_manifests(load_spec_file(CLUSTER), SelfOptions()):
        if manifest["kind"] == "Deployment":
            (container,) = manifest["spec"]["template"]["spec"]["containers"]
            assert container["command"][0] == "gpuplex"


def test_the_tag_built_is_the_image_self_deploys() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__
    assert f"registry.local/gpuplex/gpuplex:{__version__}" == DEFAULT_IMAGE
    images = {
        container["image"]
        for manifest in self_manifests(load_spec_file(CLUSTER), SelfOptions())
        if manifest["kind"] == "Deployment"
        for container in manifest["spec"]["template"]["spec"]["containers"]
    }
    assert images == {DEFAULT_IMAGE}
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nimage:", 1)[1].split("\n\n", 1)[0]
    assert "from gpuplex.kube.self_options import DEFAULT_IMAGE" in recipe
    assert "-f Containerfile" in recipe


def test_the_build_context_is_what_the_containerfile_copies_and_nothing_else() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".containerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    kept = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied: set[str] = set()
    for stage in _stages()[1]:
        for step in stage:
            if step.keyword == "COPY" and not step.arguments.startswith("--from"):
                copied.update(p.removeprefix("./").rstrip("/") for p in step.arguments.split()[:-1])
    assert kept == copied == {"pyproject.toml", "README.md", "src"}
    # the digest that names a built image covers exactly these, and the build's own files
    assert set(build.BUILD_INPUTS) == copied | {"Containerfile", ".containerignore"}


# --- the image itself ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image() -> str:
    """The tag of the image built from this tree (`make image-local`)."""
    tag = build.current_tag()
    missing = build.missing_tools(("buildah",))
    if missing is None and not build.image_exists(tag):
        missing = (
            f"no image built from this tree ({tag} is not in {build.image_dir()}): "
            "make image-local builds it"
        )
    if missing:
        if os.environ.get("GPUPLEX_REQUIRE_IMAGE") == "1":
            pytest.fail(f"{missing}, and GPUPLEX_REQUIRE_IMAGE=1 makes it mandatory")
        pytest.skip(missing)
    return tag


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[str]:
    """A buildah working container of that image."""
    working = build.run_buildah("from", "--pull-never", image, capture=True).stdout.strip()
    try:
        yield working
    finally:
        build.run_buildah("rm", working, capture=True)


def _run(container: str, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` in the container, as the image's user, with a wide terminal for help pages."""
    return subprocess.run(  # noqa: S603 - buildah, arguments built here
        build.buildah("run", "--env", "COLUMNS=200", container, "--", *command),
        env=build.buildah_environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_image_is_configured_to_run_gpuplex_as_the_pods_user(image: str) -> None:
    inspected = build.run_buildah("inspect", "--type", "image", image, capture=True)
    config = json.loads(inspected.stdout)["OCIv1"]["config"]
    assert config["User"] == f"{RUN_AS}:{RUN_AS}"
    assert config["Entrypoint"] == ["gpuplex"]


def test_gpuplex_answers_its_version_inside_the_image_as_a_user_other_than_root(
    container: str,
) -> None:
    version = _run(container, "gpuplex", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"gpuplex {__version__}"
    user = _run(container, "id", "-u")
    assert user.returncode == 0, user.stderr
    assert user.stdout.strip() == str(RUN_AS)
    assert user.stdout.strip() != "0"


def test_the_server_and_gateway_accept_every_option_the_rendered_pods_pass(
    container: str,
) -> None:
    manifests = self_manifests(load_spec_file(CLUSTER), SelfOptions(metrics_from=("10.0.0.0/8",)))
    commands = {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]["containers"][0]["command"]
        for m in manifests
        if m["kind"] == "Deployment"
    }
    for name, subcommand in ((SERVER, "server"), (GATEWAY, "gateway")):
        command = commands[name]
        assert command[:2] == ["gpuplex", subcommand]
        shown = _run(container, "gpuplex", subcommand, "--help")
        assert shown.returncode == 0, shown.stderr
        for option in (arg for arg in command if arg.startswith("--")):
            assert option in shown.stdout, f"gpuplex {subcommand} --help lacks {option}"


def test_the_image_holds_no_compiler(container: str) -> None:
    script = " ".join(f"command -v {tool};" for tool in COMPILERS) + " true"
    found = _run(container, "sh", "-c", script)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "", f"build tools in the image: {found.stdout.split()}"
    pip = _run(container, "sh", "-c", f"ls {VENV}/bin")
    assert "gpuplex" in pip.stdout.split()
    assert "pip" not in pip.stdout.split()
