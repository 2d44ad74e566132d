"""Checks made before `host apply` changes anything, for what would otherwise fail only once a
replica is started (and then crash-loop with the cause buried in its log): a command that is not on
the replica's PATH, or one that the tenant's unprivileged user cannot run (a virtualenv under
/root, say), and a state directory those users cannot reach."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from gpuplex.core.apply.model import DesiredHost, WorkloadDesired
from gpuplex.core.apply.users import runs_as_root
from gpuplex.core.spec.runtime import Runtime
from gpuplex.host.interpreter import reachable_by_others


def launch_problems(
    host: DesiredHost, base_path: str, state_dir: Path, *, as_root: bool
) -> list[str]:
    """Each problem in one line that names the replica, what is wrong and the fix."""
    problems: list[str] = []
    processes = [w for w in host.workloads if w.runtime is Runtime.PROCESS and w.argv]
    switching = [w for w in processes if as_root and not runs_as_root(w)]
    if switching and not reachable_by_others(state_dir.absolute()):
        problems.append(
            f"the state directory {state_dir} is inside a folder other users cannot enter (a "
            "parent lacks o+x), and tenants run as their own users: choose another --state-dir, "
            "e.g. under /var/lib/gpuplex"
        )
    said: set[tuple[str, str]] = set()
    for wanted in processes:
        problem = _command_problem(wanted, base_path, as_root and not runs_as_root(wanted))
        if problem is not None and (wanted.tenant, wanted.argv[0]) not in said:
            said.add((wanted.tenant, wanted.argv[0]))
            problems.append(problem)
    return problems


def _command_problem(wanted: WorkloadDesired, base_path: str, other_user: bool) -> str | None:
    program = wanted.argv[0]
    path = wanted.env.get("PATH", base_path)
    found = program if "/" in program else shutil.which(program, path=path)
    where = f"{wanted.tenant}/{wanted.workload}"
    if found is None or not os.path.isfile(found):
        return (
            f"{where}: the command `{program}` is not on the replica's PATH ({path}): give its "
            "full path in `command`, or set PATH in the workload's `env`"
        )
    real = Path(found).resolve()
    if other_user and not (reachable_by_others(real) and real.stat().st_mode & 0o005 == 0o005):
        shown = found if str(real) == found else f"{found} (that is {real})"
        return (
            f"{where}: the command `{program}` is {shown}, which the tenant's own user cannot "
            "run (it or a folder above it is not open to other users): install it where tenants "
            "can run it (e.g. python3 -m venv /opt/...), or give another command"
        )
    return None
