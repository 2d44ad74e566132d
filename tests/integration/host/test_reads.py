"""Folders granted in the spec (`reads`), through `gpuplex host apply` as root (tenants run as their
own users): a replica sees each granted folder read-only, even one under the host's /tmp, and
nothing its arguments merely name; a folder its user cannot read is refused before anything
changes, at its line in the spec, naming the file that is closed."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.integration.host.hostrun import Host, spec, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="tenants run as users of their own, in a private /tmp, only as root"
)

GPUS = [{"model": "H100-80GB", "count": 1}]
#: What the replica tries, written to its HOME: read the granted folder, write into it, look at
#: a folder only its arguments name.
PROBE = (
    'granted=$1; named=$2; {{ cat "$granted/weights.bin" && echo " read"; '
    'touch "$granted/new" 2>/dev/null && echo wrote || echo write-refused; '
    'ls "$named" >/dev/null 2>&1 && echo named-visible || echo named-hidden; '
    '}} > "$HOME/result.txt"'
)


def reader(granted: Path, named: Path, reads: list[str]) -> dict[str, object]:
    workload = {
        "name": "job",
        "kind": "batch",
        "gpu": {"count": 1},
        "command": ["/bin/sh", "-c", PROBE.format(), "probe", str(granted), str(named)],
        "reads": reads,
        "restart": {"policy": "never"},
    }
    return {"name": "ivy", "isolation": "dedicated", "workloads": [workload]}


def folder(parent: Path, name: str, mode: int) -> Path:
    made = parent / name
    made.mkdir()
    (made / "weights.bin").write_text("weights")
    (made / "weights.bin").chmod(0o644)
    made.chmod(mode)
    return made


def test_a_replica_sees_its_granted_folder_read_only_and_nothing_its_arguments_name(
    host: Host,
) -> None:
    granted = folder(host.root, "model", 0o777)  # its user may write here on the host: not inside
    named = folder(host.root, "named", 0o755)  # readable by anyone, but not granted
    path = host.write_spec(spec([reader(granted, named, [str(granted)])], GPUS))
    host.apply(path)
    result = host.state_dir / "homes" / "ivy" / "result.txt"
    wait_for("the replica's answer", lambda: result.exists() and "named" in result.read_text())
    assert result.read_text().split("\n")[:3] == ["weights read", "write-refused", "named-hidden"]
    assert not (granted / "new").exists()


def test_a_granted_folder_the_tenants_user_cannot_read_is_refused_at_its_line(host: Host) -> None:
    granted = folder(host.root, "model", 0o755)
    (granted / "weights.bin").chmod(0o600)  # root's only, as downloaded weights often are
    named = folder(host.root, "named", 0o755)
    path = host.write_spec(spec([reader(granted, named, [str(named), str(granted)])], GPUS))
    lines = path.read_text().splitlines()
    line = max(n for n, text in enumerate(lines, 1) if text.endswith("/model"))  # in reads
    done = host.gpuplex("host", "apply", str(path), "--driver", "sim", check=False)
    assert done.returncode != 0
    message = " ".join(done.stderr.split())  # the console wraps long lines
    assert re.search(rf"{path}:{line}:\d+: tenants\[0\]\.workloads\[0\]\.reads\[1\]:", message)
    assert f"cannot read {granted / 'weights.bin'} (owner root, group root, mode -rw-------)" in (
        message
    )
    assert f"chmod -R o+rX {granted}" in message
    assert "Traceback" not in done.stderr
    assert not (host.state_dir / "state.json").exists()  # nothing was started or recorded

    dry = host.gpuplex("host", "apply", str(path), "--driver", "sim", "--dry-run")
    assert "would not start" in dry.stdout
    assert "ivy/job: reads[1]" in " ".join(dry.stdout.split())
