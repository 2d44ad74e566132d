"""The exact command and environment that start a replica: GPU visibility, MPS limits, the cgroup it
joins before its program runs, network namespace and user, or the container engine's run command.
Pure: paths and device UUIDs are arguments."""

from __future__ import annotations

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


def process_argv(
    wanted: WorkloadDesired, cgroup_procs: list[str], run_as: tuple[int, int] | None = None
) -> list[str]:
    """The argv for the process runtime: join cgroups, enter a private network namespace
    (network: none), drop to the tenant's Unix user (`run_as`), then exec the workload's command."""
    argv = ["/bin/sh", "-c", _JOIN_CGROUPS, "gpuplex-launch", *cgroup_procs, "--"]
    if wanted.network is Network.NONE:
        # A new network namespace holds only a loopback device, down until set up.
        argv += ["unshare", "--net", "--", "/bin/sh", "-c", 'ip link set lo up; exec "$@"', "net"]
    if run_as is not None:  # the tenant's unix_user, as (uid, primary gid)
        uid, gid = run_as
        argv += ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
        argv += ["--init-groups", "--no-new-privs", "--"]
    return argv + wanted.argv


def container_name(wanted: WorkloadDesired) -> str:
    return f"gpuplex-{wanted.tenant}-{wanted.workload}-{wanted.replica}"


def container_argv(
    engine: str, wanted: WorkloadDesired, device_uuids: list[str], env: dict[str, str]
) -> list[str]:
    """`docker run` / `podman run` for a replica: its GPU by UUID, CPU and memory limits, read-only
    root, every capability dropped, no privilege escalation, the tenant's own network."""
    if wanted.image is None:
        raise ValueError(f"{wanted.label} has no image")  # desired_host gives images only here
    argv = [engine, "run", "--detach", "--name", container_name(wanted)]
    argv += [
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
    if wanted.network is Network.NONE:
        argv += ["--network", "none"]
    else:
        argv += ["--network", f"gpuplex-{wanted.tenant}"]
        if wanted.port is not None:
            argv += ["--publish", f"127.0.0.1:{wanted.port}:{wanted.port}"]
    if wanted.unix_user is not None:
        argv += ["--user", wanted.unix_user]
    for name, value in sorted(env.items()):
        argv += ["--env", f"{name}={value}"]
    return [*argv, wanted.image, *wanted.argv]
