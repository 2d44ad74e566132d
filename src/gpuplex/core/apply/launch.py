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


#: At most this many folders under a private path are kept visible (shell fds 3 to 9).
MAX_KEPT = 7


def process_argv(
    wanted: WorkloadDesired,
    cgroup_procs: list[str],
    run_as: tuple[int, int] | None = None,
    *,
    private_tmp: bool = False,
    keep: tuple[str, ...] = (),
    exit_file: str | None = None,
) -> list[str]:
    """The argv for the process runtime: join cgroups; enter new namespaces where asked (network:
    none, and every job, gets a network of its own with loopback only; `private_tmp` a mount
    namespace with its own /tmp, /var/tmp and /dev/shm, where the folders of `keep` that lie
    under those, such as the state directory, stay visible); drop to the tenant's Unix user (`run_as`, as uid and gid)
    with no way back to privilege (no_new_privs, no capabilities); then exec the command. With
    `exit_file`, the launching shell (root, where gpuplex is) stays and writes the exit status
    there."""
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
        setup += _private_mounts(paths, keep)
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


def _private_mounts(paths: list[str], keep: tuple[str, ...]) -> list[str]:
    """Shell steps: a fresh tmpfs on each of `paths`; each folder of `keep` under one of them is
    opened first (fd 3, 4, ...) and bound back at its own path, so it is still reached there.

    The folders made on the fresh tmpfs to reach a kept folder are 711 (umask 066): passed
    through, never listed, and holding nothing but the way to what is kept. Which folders may be
    kept at all (none the replica's user could not reach on the host, but gpuplex's own state
    directory) is the caller's decision (host/launcher.py `kept_visible`)."""
    under = [k for k in keep if any(k.startswith(path.rstrip("/") + "/") for path in paths)]
    kept = [k for k in dict.fromkeys(under) if not any(k.startswith(o + "/") for o in under)]
    kept = kept[:MAX_KEPT]  # the state directory first (the caller's order); more is unusual
    steps = []
    if kept:
        steps.append("exec " + " ".join(f"{3 + n}<{shlex.quote(k)}" for n, k in enumerate(kept)))
    steps += [f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {path}" for path in paths]
    for n, folder in enumerate(kept):
        # --no-canonicalize: mount would otherwise turn /proc/self/fd/N back into the path,
        # which now names the empty folder on the new tmpfs; the kernel follows the fd itself
        quoted = shlex.quote(folder)
        steps.append(
            f"(umask 066 && mkdir -p {quoted}) && "
            f"mount --no-canonicalize --bind /proc/self/fd/{3 + n} {quoted}"
        )
    if kept:
        steps.append("exec " + " ".join(f"{3 + n}<&-" for n in range(len(kept))))
    return steps


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
