"""Item 1 of the host abuse list, against the real host runtime as root on this machine: a tenant
without `unix_user` runs as an unprivileged user of its own, with no_new_privs and no
capabilities, a private writable directory and a private /tmp; it cannot write /etc, read
/etc/shadow or leave its cgroup. `unix_user: root` is an explicit opt-in that validate, plan and
apply warn about."""

from __future__ import annotations

import os
import pwd
import tempfile
import time
from pathlib import Path

import pytest

from gpuplex.host.cgroups import Cgroups
from gpuplex.host.state import StateDir
from tests.integration.host.hostrun import Host, spec, wait_for

GPUS = [{"model": "H100-80GB", "count": 2}]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="tenant users need gpuplex as root"),
    pytest.mark.stacks,
]

# What a hostile tenant tries, each attempt's outcome written to its own directory.
PROBE = """
out="$HOME/probe"; mkdir -p "$out"
id -u > "$out/uid"; pwd > "$out/cwd"
cat /proc/self/status > "$out/status"; cat /proc/self/cgroup > "$out/cgroup"
(echo pwned > /etc/gpuplex-pwned-{marker}) 2>/dev/null && echo wrote-etc >> "$out/did"
(cat /etc/shadow > /dev/null) 2>/dev/null && echo read-shadow >> "$out/did"
for procs in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs; do
  (echo $$ > "$procs") 2>/dev/null && echo "left-cgroup $procs" >> "$out/did"
done
(echo hidden > /tmp/gpuplex-probe-{marker}) 2>/dev/null && echo wrote-private-tmp >> "$out/did"
(echo mine > "$HOME/file") 2>/dev/null && echo wrote-home >> "$out/did"
touch "$out/done"
exec sleep 300
"""


def prober(name: str, marker: str, **tenant: object) -> dict[str, object]:
    script = PROBE.replace("{marker}", marker)
    job = {
        "name": "probe",
        "kind": "batch",
        "gpu": {"count": 1},
        "command": ["/bin/sh", "-c", script],
        "restart": {"policy": "never"},
    }
    return {"name": name, "isolation": "dedicated", **tenant, "workloads": [job]}


def probe_dir(host: Host, tenant: str) -> Path:
    return host.state_dir / "homes" / tenant / "probe"


def effective_uid(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[2])


def field_of(status: str, name: str) -> str:
    return next(line for line in status.splitlines() if line.startswith(f"{name}:")).split()[1]


def test_a_tenant_runs_as_its_own_unprivileged_user_and_cannot_get_out(
    host: Host, cgroups: Cgroups
) -> None:
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    document = spec([prober("alpha", marker), prober("beta", marker)], GPUS)
    host.apply(host.write_spec(document))
    for tenant in ("alpha", "beta"):
        done = probe_dir(host, tenant) / "done"
        wait_for(f"{tenant}'s probe", done.exists)

    instance = StateDir(host.state_dir).instance
    uids = {}
    for tenant in ("alpha", "beta"):
        found = probe_dir(host, tenant)
        status = (found / "status").read_text()
        uid = effective_uid(status)
        assert uid != 0
        assert pwd.getpwuid(uid).pw_name == f"gpx-{instance[:6]}-{tenant}"
        uids[tenant] = uid
        assert field_of(status, "NoNewPrivs") == "1"
        assert int(field_of(status, "CapEff"), 16) == 0
        assert int(field_of(status, "CapBnd"), 16) == 0
        did = (found / "did").read_text().split("\n") if (found / "did").exists() else []
        assert "wrote-home" in did  # its own directory is writable...
        assert "wrote-private-tmp" in did  # ...and so is its own /tmp,
        assert not any(line.startswith(("wrote-etc", "read-shadow", "left-cgroup")) for line in did)
        assert not Path(f"/etc/gpuplex-pwned-{marker}").exists()
        host_tmp = Path(tempfile.gettempdir())
        assert not (host_tmp / f"gpuplex-probe-{marker}").exists()  # which is not the host's
        home = host.state_dir / "homes" / tenant
        assert (found / "cwd").read_text().strip() == str(home)
        assert home.stat().st_uid == uid
        assert home.stat().st_mode & 0o777 == 0o700
        assert f"gpuplex/{instance}/{tenant}/probe-0" in (found / "cgroup").read_text()
    assert uids["alpha"] != uids["beta"]  # tenants cannot signal or trace each other
    # gpuplex's own files stay unreadable to tenants
    for name in ("desired.json", "state.json", "events.jsonl"):
        assert (host.state_dir / name).stat().st_mode & 0o077 == 0
    assert (host.state_dir / "logs").stat().st_mode & 0o077 == 0

    # an instance gone for good takes its users along; their folders stay, handed to root
    down = host.gpuplex("host", "down", "--forget-users")
    assert f"gpx-{instance[:6]}-alpha" in down.stdout
    assert not [u.pw_name for u in pwd.getpwall() if u.pw_name.startswith(f"gpx-{instance[:6]}-")]
    assert (host.state_dir / "homes" / "alpha").stat().st_uid == 0


def test_root_is_an_explicit_opt_in_that_every_command_warns_about(
    host: Host, cgroups: Cgroups
) -> None:
    uid_file = host.root / "rooted-uid"
    job = {
        "name": "job",
        "kind": "batch",
        "gpu": {"count": 1},
        "command": ["/bin/sh", "-c", f"id -u > {uid_file}; exec sleep 300"],
        "restart": {"policy": "never"},
    }
    tenant = {"name": "rooted", "isolation": "dedicated", "unix_user": "root", "workloads": [job]}
    path = host.write_spec(spec([tenant], GPUS))
    for command in (["validate", str(path)], ["plan", str(path)]):
        done = host.run_cli(*command)
        assert done.returncode == 0, done.stderr
        assert "tenant rooted runs as root (unix_user: root)" in done.stderr
    applied = host.gpuplex("host", "apply", str(path), "--driver", "sim")
    assert "tenant rooted runs as root" in applied.stderr
    wait_for("the job", lambda: uid_file.exists() and uid_file.read_text().strip() != "")
    assert uid_file.read_text().strip() == "0"
