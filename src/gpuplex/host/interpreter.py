"""A Python interpreter other users can run with gpuplex importable: for what gpuplex starts as an
unprivileged user (the gateway, the simulated tenants of `gpuplex up`). A virtualenv made from an
interpreter under /root (pyenv, say) cannot be run by anyone else; the system's interpreter of the
same version then runs with this one's packages on PYTHONPATH (the same ABI, so its compiled
packages load)."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import gpuplex
from gpuplex.errors import HostActionError


def reachable_by_others(path: Path) -> bool:
    """Whether users other than the owner can reach `path`: o+x on it and on every parent."""
    for part in [path, *path.parents]:
        if part.exists() and not os.stat(part).st_mode & 0o001:
            return False
    return True


def python_for_others() -> tuple[str, dict[str, str]]:
    """(interpreter, extra environment) that another user can run `-m gpuplex...` with."""
    packages = [
        Path(gpuplex.__file__).resolve().parents[1],  # the source tree of an editable install
        Path(sysconfig.get_paths()["purelib"]),
    ]
    unreachable = [str(path) for path in packages if not reachable_by_others(path)]
    if unreachable:
        raise HostActionError(
            f"gpuplex is installed where other users cannot read it ({', '.join(unreachable)}), "
            "yet it must run processes as unprivileged users: install it somewhere they can "
            "read (e.g. python3 -m venv /opt/gpuplex), or make the folders o+rx"
        )
    if reachable_by_others(Path(sys.executable).resolve()):
        return sys.executable, {}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if not system.is_file() or not reachable_by_others(system.resolve()):
        raise HostActionError(
            f"this Python ({Path(sys.executable).resolve()}) is in a folder other users cannot "
            f"enter, and there is no {system} to use instead: install gpuplex with an interpreter "
            "other users can run (e.g. python3 -m venv /opt/gpuplex)"
        )
    return str(system), {"PYTHONPATH": os.pathsep.join(str(path) for path in packages)}
