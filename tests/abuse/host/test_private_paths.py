"""A workload of the spec names host paths under /tmp, where each replica has a private /tmp of its
own: against the real host runtime as root, a folder its user can reach on the host is still there
(bound back), while one behind a 700 folder, named as an argument, on PYTHONPATH or as its
program's folder, is not: binding it (and making its parents on the fresh tmpfs) would have let
the tenant read what it cannot open on the host. The folders made on the tmpfs to reach a kept
one are 711: passed through, not listed."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.host.cgroups import Cgroups
from tests.integration.host.hostrun import Host, spec, wait_for

GPUS = [{"model": "H100-80GB", "count": 1}]
SECRET = "TOPSECRET-behind-a-700-folder"  # noqa: S105 - a marker, no password
SHARED = "shared-model-weights"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="tenant users need gpuplex as root"),
    pytest.mark.stacks,
]

# Each attempt's outcome, one line each, in the tenant's home.
PROBE = r"""
out="$HOME/paths"; : > "$out"
for f in "$@"; do
  if content=$(cat "$f" 2>/dev/null); then echo "read $f: $content" >> "$out";
  else echo "cannot read $f" >> "$out"; fi
done
for d in $(echo "$PYTHONPATH" | tr ':' ' '); do
  if ls "$d" >/dev/null 2>&1; then echo "listed $d: $(ls "$d" | tr '\n' ' ')" >> "$out";
  else echo "cannot list $d" >> "$out"; fi
done
echo "mode of $BASE: $(stat -c %a "$BASE" 2>&1)" >> "$out"
touch "$HOME/paths-done"
exec sleep 300
"""


@pytest.fixture
def folders() -> Iterator[Path]:
    """Under /tmp: `open/weights` (a file any user may read, in folders any may enter) and
    `closed/sub/secret` (a file any user could read, were it not behind `closed`, 700)."""
    base = Path(tempfile.mkdtemp(prefix="gpuplex-paths-", dir="/tmp"))
    base.chmod(0o755)
    (base / "open").mkdir(mode=0o755)
    (base / "open" / "weights").write_text(SHARED)
    (base / "closed" / "sub").mkdir(parents=True)
    (base / "closed" / "sub" / "secret").write_text(SECRET)
    (base / "closed" / "sub").chmod(0o755)
    (base / "closed" / "sub" / "secret").chmod(0o644)
    (base / "closed").chmod(0o700)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_workload_sees_the_folders_its_user_can_reach_and_none_behind_a_closed_one(
    host: Host, cgroups: Cgroups, folders: Path
) -> None:
    secret, weights = folders / "closed/sub/secret", folders / "open/weights"
    workload = {
        "name": "probe",
        "kind": "batch",
        "gpu": {"count": 1},
        "command": ["/bin/sh", "-c", PROBE, "probe", str(secret), str(weights)],
        "env": {"PYTHONPATH": f"{folders / 'closed/sub'}:{folders / 'open'}", "BASE": str(folders)},
        "restart": {"policy": "never"},
    }
    tenant = {"name": "nosy", "isolation": "dedicated", "workloads": [workload]}
    host.apply(host.write_spec(spec([tenant], GPUS)))
    home = host.state_dir / "homes" / "nosy"
    wait_for("the probe", (home / "paths-done").exists)
    seen = (home / "paths").read_text()
    assert SECRET not in seen
    assert f"cannot read {secret}" in seen
    assert f"cannot list {folders / 'closed/sub'}" in seen
    assert f"read {weights}: {SHARED}" in seen  # a reachable folder it names is still there
    assert f"listed {folders / 'open'}: weights" in seen
    assert f"mode of {folders}: 711" in seen  # made on the fresh tmpfs to reach `open`
