"""The exact command and environment that start a replica: GPU visibility, MPS limits, the cgroup it
joins before its program runs, network namespace and user, or the container engine's run command.
Pure: paths and device UUIDs are arguments."""

from __future__ import annotations

import shlex

from gpuplex.core.apply.model import WorkloadDesired
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.runtime import Network

#: Exit status of the launch wrapper when it cannot join the replica's cgroup.
CGROUP_JOIN_FAILED = 125

# `sh -c` script: write our pid into each cgroup.procs given before `--`, then exec the rest. The
# program therefore starts inside its cgroup; no memory it allocates escapes the limit.
_JOIN_CGROUPS = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit '
    + str(CGROUP_JOIN_FAILED)
    + '; shift; done; shift; exec "$@"'
)


# The same for a replica whose exit status must outlive gpuplex (one never restarted: a job): the
# shell stays as the replica's main process instead of exec-ing, runs the rest, and writes its exit
# status (128 + N for signal N) to the file given first, so a gpuplex restarted meanwhile, which
# cannot wait for a process it did not start, still learns how it ended. It survives the SIGTERM
# sent to the replica's group (a trap that does nothing; the program gets SIGTERM as usual), and
# ends as the program did: killed by the same signal, or with the same exit code.
_JOIN_CGROUPS_RECORDING_EXIT = (
    'f="$1"; shift; '
    + _JOIN_CGROUPS.removesuffix('exec "$@"')
    + 'trap : TERM INT HUP; "$@"; code=$?; echo "$code" > "$f"; '
    + 'if [ "$code" -gt 128 ]; then trap - TERM INT HUP; kill -$((code - 128)) $$; fi; '
    + 'exit "$code"'
)


def gpu_environment(
    wanted: WorkloadDesired, device_uuids: list[str], mps_pipe_dir: str | None
) -> dict[str, str]:
    """What makes a replica see exactly its GPU, MIG device or MPS share.

    MPS clients get no CUDA_VISIBLE_DEVICES: their daemon was started with the GPU's UUID, and
    the MPS documentation says clients should not set it. Their limits are per client:
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (device 0 of the
    daemon's one visible GPU)."""
    binding = wanted.binding
    if binding.mode is Mode.MPS:
        if not mps_pipe_dir:
            # An empty value would send the client to the default daemon, not its GPU's.
            raise ValueError(f"{wanted.label} is an MPS client but its GPU has no MPS daemon")
        env = {
            "CUDA_MPS_PIPE_DIRECTORY": mps_pipe_dir,
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={binding.memory_mib}M",
        }
        if binding.thread_percent is not None:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(binding.thread_percent)
        return env
    return {"CUDA_VISIBLE_DEVICES": ",".join(device_uuids)}


#: Mounted over these in a replica's own mount namespace (a private /tmp): a tenant cannot leave
#: files there for another, nor fill the host's. /dev/shm too, except for MPS clients, which
#: share it with their MPS server.
PRIVATE_TMP = ("/tmp", "/var/tmp")  # noqa: S108 - the paths being made private
PRIVATE_SHM = "/dev/shm"  # noqa: S108 - the path being made private


def process_argv(
    wanted: WorkloadDesired,
    cgroup_procs: list[str],
    run_as: tuple[int, int] | None = None,
    *,
    private_tmp: bool = False,
    keep: tuple[str, ...] = (),
    read_only: tuple[tuple[str, str], ...] = (),
    exit_file: str | None = None,
) -> list[str]:
    """The argv for the process runtime: join cgroups; enter new namespaces where asked (network:
    none, and every job, gets a network of its own with loopback only; `private_tmp` a mount
    namespace with its own /tmp, /var/tmp and /dev/shm, where the folders of `keep` that lie
    under those, such as the state directory, stay visible, and each folder of `read_only`, as
    (its path, the real folder on the host), is seen read-only wherever it lies); drop to the
    tenant's Unix user (`run_as`, as uid and gid) with no way back to privilege (no_new_privs,
    no capabilities); then exec the command. With `exit_file`, the launching shell (root, where
    gpuplex is) stays and writes the exit status there."""
    if exit_file is None:
        argv = ["/bin/sh", "-c", _JOIN_CGROUPS, "gpuplex-launch", *cgroup_procs, "--"]
    else:
        script = _JOIN_CGROUPS_RECORDING_EXIT
        argv = ["/bin/sh", "-c", script, "gpuplex-launch", exit_file, *cgroup_procs, "--"]
    setup: list[str] = []
    unshare = ["unshare"]
    if own_network(wanted):
        # A new network namespace holds only a loopback device, down until set up.
        unshare.append("--net")
        setup.append("ip link set lo up")
    if private_tmp:
        unshare += ["--mount", "--propagation", "private"]
        paths = [*PRIVATE_TMP] + ([] if wanted.binding.mode is Mode.MPS else [PRIVATE_SHM])
        setup += _private_mounts(paths, keep, read_only)
    if setup:
        script = " && ".join(setup) + ' && exec "$@"'
        argv += [*unshare, "--", "/bin/sh", "-c", script, "gpuplex-namespaces"]
    if run_as is not None:  # the tenant's user, as (uid, primary gid)
        uid, gid = run_as
        argv += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--init-groups"]
        argv += ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return argv + wanted.argv


def own_network(wanted: WorkloadDesired) -> bool:
    """Whether the replica gets a network namespace of its own: `network: none`, and a job
    whatever its file says (on the host's network it could take a port the plan gives to another
    tenant's model server)."""
    return wanted.network is Network.NONE or wanted.job


def _private_mounts(
    paths: list[str], keep: tuple[str, ...], read_only: tuple[tuple[str, str], ...] = ()
) -> list[str]:
    """Shell steps: a fresh tmpfs on each of `paths`; then each folder to keep bound back at its
    own path, each folder of `read_only` (path, real folder) bound at its path read-only.

    Before the tmpfs covers a private path, it is opened (fd 3, 4, 5), and what lay under it is
    bound from `/proc/self/fd/N/<the rest of its path>`: the kernel follows the open folder, not
    the new tmpfs. Parents are bound before what lies in them, so a kept folder inside a
    read-only one (the state directory inside a granted folder) stays writable. The folders made
    on the fresh tmpfs to reach a bound one are 711 (umask 066): passed through, never listed,
    and holding nothing but the way to what is bound. Which folders may be kept or granted at
    all is the caller's decision (host/launcher.py `kept_visible`, host/grants.py)."""
    binds: dict[str, tuple[str, bool]] = {}  # path in the namespace -> (real folder, read-only)
    for folder, real in read_only:
        target = folder if _under_any(folder, paths) else real  # a link outside: its folder
        binds[target] = (real, True)
    for folder in keep:
        if _under_any(folder, paths) or _under_any(
            folder, [t for t, (_, ro) in binds.items() if ro]
        ):
            binds[folder] = (folder, False)  # gpuplex's own folders stay writable
    opened = [p for p in paths if any(_under(real, p) for real, _ in binds.values())]
    steps = []
    if opened:
        steps.append("exec " + " ".join(f"{3 + n}<{shlex.quote(p)}" for n, p in enumerate(opened)))
    steps += [f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {path}" for path in paths]
    for target in sorted(binds, key=lambda t: (t.count("/"), t)):
        real, ro = binds[target]
        source = real
        for n, path in enumerate(opened):
            if _under(real, path):
                rest = real[len(path.rstrip("/")) :].lstrip("/")
                source = f"/proc/self/fd/{3 + n}" + (f"/{rest}" if rest else "")
                break
        quoted = shlex.quote(target)
        # --no-canonicalize: mount would otherwise turn /proc/self/fd/N back into the path,
        # which now names the empty folder on the new tmpfs; the kernel follows the fd itself
        step = f"mount --no-canonicalize --bind {shlex.quote(source)} {quoted}"
        if _under_any(target, paths):
            step = f"(umask 066 && mkdir -p {quoted}) && {step}"
        if ro:
            step += f" && mount --no-canonicalize -o remount,bind,ro,nosuid,nodev {quoted}"
        steps.append(step)
    if opened:
        steps.append("exec " + " ".join(f"{3 + n}<&-" for n in range(len(opened))))
    return steps


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _under_any(path: str, folders: list[str]) -> bool:
    return any(_under(path, folder) for folder in folders)


def container_name(wanted: WorkloadDesired, instance: str) -> str:
    """Unique per gpuplex instance on the host: two instances never remove each other's."""
    return f"gpuplex-{instance}-{wanted.tenant}-{wanted.workload}-{wanted.replica}"


def container_network(tenant: str, instance: str) -> str:
    return f"gpuplex-{instance}-{tenant}"


def container_argv(
    engine: str,
    wanted: WorkloadDesired,
    device_uuids: list[str],
    env: dict[str, str],
    instance: str,
    user: tuple[int, int] | None,
) -> list[str]:
    """`docker run` / `podman run` for a replica: its GPU by UUID, CPU and memory limits, read-only
    root, every capability dropped, no privilege escalation, the tenant's own network, and the
    tenant's unprivileged user (`user`; None only for the `unix_user: root` opt-in)."""
    if wanted.image is None:
        raise ValueError(f"{wanted.label} has no image")  # desired_host gives images only here
    argv = [engine, "run", "--detach", "--name", container_name(wanted, instance)]
    argv += [
        "--label",
        f"gpuplex.instance={instance}",
        "--label",
        f"gpuplex.tenant={wanted.tenant}",
        "--label",
        f"gpuplex.workload={wanted.workload}",
    ]
    argv += ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if wanted.binding.mode is Mode.MPS:
        argv += [
            "--ipc",
            "host",
            "--volume",
            f"{env['CUDA_MPS_PIPE_DIRECTORY']}:{env['CUDA_MPS_PIPE_DIRECTORY']}",
        ]
    if device_uuids:
        devices = ",".join(device_uuids)
        # The engine splits --gpus on commas unless the device list is quoted.
        argv += ["--gpus", f'"device={devices}"' if len(device_uuids) > 1 else f"device={devices}"]
    limits = wanted.limits
    if limits.cpu_cores is not None:
        argv += ["--cpus", f"{limits.cpu_cores:g}"]
    if limits.memory_gib is not None:
        argv += ["--memory", f"{round(limits.memory_gib * 1024)}m"]
    if limits.pids is not None:
        argv += ["--pids-limit", str(limits.pids)]
    if own_network(wanted):
        argv += ["--network", "none"]
    else:
        argv += ["--network", container_network(wanted.tenant, instance)]
        if wanted.port is not None:
            argv += ["--publish", f"127.0.0.1:{wanted.port}:{wanted.port}"]
    if user is not None:
        argv += ["--user", f"{user[0]}:{user[1]}"]
    for name, value in sorted(env.items()):
        argv += ["--env", f"{name}={value}"]
    return [*argv, wanted.image, *wanted.argv]
