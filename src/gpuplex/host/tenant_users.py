"""The Unix users tenants run as, on the host: made on first use with `useradd --system` (no
login shell, no home of its own; gpuplex gives each tenant a private directory instead), and each
tenant's private writable directory under the state directory."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from gpuplex.core.apply.users import is_default_user
from gpuplex.errors import HostActionError
from gpuplex.host.proc import user_ids

NOLOGIN = "/usr/sbin/nologin"


def ensure_user(name: str) -> tuple[int, int]:
    """(uid, gid) of the system user `name`, made now if it does not exist yet."""
    found = user_ids(name)
    if found is not None:
        return found
    useradd = shutil.which("useradd")
    if useradd is None:
        raise HostActionError(
            f"tenant user {name} does not exist and there is no `useradd` to make it: create it "
            f"(a system user without login, e.g. `adduser -S {name}`), or set the tenant's "
            "unix_user to an existing user"
        )
    argv = [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
    argv += ["--shell", NOLOGIN if Path(NOLOGIN).exists() else "/bin/false"]
    argv += ["--comment", "gpuplex tenant", name]
    done = subprocess.run(  # noqa: S603 - fixed argv; the name is pattern-checked by the spec
        argv, capture_output=True, text=True, timeout=60, check=False
    )
    found = user_ids(name)  # another instance may have made it at the same moment: fine
    if found is None:
        raise HostActionError(
            f"could not create tenant user {name}: useradd exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()}"
        )
    return found


def private_directory(homes: Path, tenant: str, uid: int, gid: int) -> Path:
    """`<homes>/<tenant>`: the one place the tenant may write (its HOME and working directory),
    owned by its user, mode 700. `homes` itself is root's, 711: passable, not listable."""
    homes.mkdir(parents=True, exist_ok=True)
    homes.chmod(0o711)
    home = homes / tenant
    home.mkdir(exist_ok=True)
    if home.is_symlink() or not home.is_dir():
        raise HostActionError(f"{home} is not a directory: remove it, then apply again")
    os.chown(home, uid, gid, follow_symlinks=False)
    home.chmod(0o700)
    return home


def remove_users(instance: str, homes: Path) -> list[str]:
    """Delete the tenant users gpuplex made for this instance (`host down --forget-users`). Their
    folders are kept, handed to root first, so that a user made later with the same uid does not
    inherit them. Returns the names removed."""
    userdel = shutil.which("userdel")
    removed = []
    for entry in pwd.getpwall():
        if not is_default_user(entry.pw_name, instance):
            continue
        if homes.is_dir():
            for home in homes.iterdir():
                if home.is_dir() and not home.is_symlink() and home.stat().st_uid == entry.pw_uid:
                    os.chown(home, 0, 0, follow_symlinks=False)
        if userdel is None:
            raise HostActionError(f"cannot remove user {entry.pw_name}: there is no `userdel`")
        done = subprocess.run(  # noqa: S603 - fixed argv, a name gpuplex made
            [userdel, entry.pw_name], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode != 0:
            raise HostActionError(
                f"could not remove user {entry.pw_name}: userdel exited {done.returncode}: "
                f"{(done.stderr or done.stdout).strip()}"
            )
        removed.append(entry.pw_name)
    return removed
