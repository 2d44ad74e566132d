"""Launch commands: GPU environment, the process runtime's wrapper (run for real through /bin/sh)
and the container engine's run command."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.apply.launch import (
    CGROUP_JOIN_FAILED,
    PRIVATE_SHM,
    PRIVATE_TMP,
    container_argv,
    gpu_environment,
    process_argv,
)
from gpuplex.core.apply.model import Binding, WorkloadDesired
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.runtime import LimitsSpec, Network
from tests.unit.core.apply.factories import binding, mig_slice, wanted

PIPE = "/run/gpuplex/mps/GPU-5/pipe"


@pytest.mark.parametrize(
    ("where", "devices"),
    [
        (binding(Mode.DEDICATED, 0), ["GPU-aaa"]),
        (binding(Mode.DEDICATED, 0, 1), ["GPU-aaa", "GPU-bbb"]),
        (binding(Mode.TIMESLICE, 2), ["GPU-ccc"]),
        (binding(Mode.MIG, 3, mig=mig_slice("3g.40gb", 4)), ["MIG-ddd"]),
    ],
)
def test_visible_devices_are_exactly_the_given_uuids(where: Binding, devices: list[str]) -> None:
    env = gpu_environment(wanted("w", where), devices, mps_pipe_dir=None)
    assert env == {"CUDA_VISIBLE_DEVICES": ",".join(devices)}


@pytest.mark.parametrize(("thread_percent", "memory_mib"), [(20, 12288), (100, 1), (7, 40960)])
def test_mps_clients_get_pipe_threads_and_pinned_memory(
    thread_percent: int, memory_mib: int
) -> None:
    share = binding(Mode.MPS, 5, memory_mib=memory_mib, thread_percent=thread_percent)
    env = gpu_environment(wanted("w", share), ["GPU-eee"], mps_pipe_dir=PIPE)
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": PIPE,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(thread_percent),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={memory_mib}M",
    }


# --- process runtime --------------------------------------------------------------------------------


def test_process_argv_joins_cgroups_then_execs_the_command_unchanged() -> None:
    job = wanted("train", binding(Mode.DEDICATED, 0), argv=["python", "-c", "print('a b')"])
    procs = ["/sys/fs/cgroup/gpuplex/acme/cgroup.procs", "/sys/fs/cgroup/cpu/x/cgroup.procs"]
    argv = process_argv(job, procs)
    assert argv[:3] == ["/bin/sh", "-c", argv[2]]
    marker = argv.index("--")
    assert argv[4:marker] == procs
    assert argv[marker + 1 :] == ["python", "-c", "print('a b')"]


@pytest.mark.parametrize(
    ("network", "run_as", "wrappers"),
    [
        (Network.HOST, None, []),
        (Network.HOST, (1001, 1002), ["setpriv"]),
        (Network.NONE, None, ["unshare"]),
        (Network.NONE, (1001, 1002), ["unshare", "setpriv"]),
    ],
)
def test_network_namespace_then_user_then_command(
    network: Network, run_as: tuple[int, int] | None, wrappers: list[str]
) -> None:
    job = wanted("batch", binding(Mode.DEDICATED, 0), network=network, unix_user="acme")
    argv = process_argv(job, ["/cg/cgroup.procs"], run_as)
    after_join = argv[argv.index("--") + 1 :]
    assert [a for a in after_join if a in ("unshare", "setpriv")] == wrappers
    assert after_join[-2:] == ["serve", "batch"]
    if "unshare" in wrappers:
        assert after_join[:3] == ["unshare", "--net", "--"]
    if "setpriv" in wrappers:
        at = after_join.index("setpriv")
        assert after_join[at + 1 : at + 3] == ["--reuid=1001", "--regid=1002"]
        assert "--no-new-privs" in after_join[at:-2]
        assert "--bounding-set=-all" in after_join[at:-2]
        assert "--inh-caps=-all" in after_join[at:-2]
        assert after_join[-3] == "--"


@pytest.mark.parametrize(
    ("mode", "network", "mounts"),
    [
        (Mode.DEDICATED, Network.HOST, [*PRIVATE_TMP, PRIVATE_SHM]),
        (Mode.MPS, Network.HOST, list(PRIVATE_TMP)),  # MPS clients share /dev/shm
        (Mode.DEDICATED, Network.NONE, [*PRIVATE_TMP, PRIVATE_SHM]),
    ],
)
def test_a_private_tmp_is_one_mount_namespace_before_the_user_switch(
    mode: Mode, network: Network, mounts: list[str]
) -> None:
    where = binding(mode, 0, thread_percent=20) if mode is Mode.MPS else binding(mode, 0)
    job = wanted("batch", where, network=network)
    argv = process_argv(job, ["/cg/cgroup.procs"], (1001, 1002), private_tmp=True)
    after_join = argv[argv.index("--") + 1 :]
    assert after_join.count("unshare") == 1
    flags = after_join[1 : after_join.index("--")]
    assert "--mount" in flags
    assert ("--net" in flags) is (network is Network.NONE)
    script = after_join[after_join.index("/bin/sh") + 2]
    assert [part.split()[-1] for part in script.split(" && ") if part.startswith("mount")] == mounts
    assert after_join.index("unshare") < after_join.index("setpriv")


def test_the_wrapper_writes_its_pid_into_each_cgroup_then_runs_the_command(
    tmp_path: Path,
) -> None:
    procs = [tmp_path / "a.procs", tmp_path / "b.procs"]
    job = wanted("hello", binding(Mode.DEDICATED, 0), argv=["echo", "hello", "$HOME", "--"])
    argv = process_argv(job, [str(p) for p in procs])
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)  # noqa: S603 - /bin/sh, our files
    out, _ = child.communicate(timeout=10)
    assert child.returncode == 0
    assert out == "hello $HOME --\n"  # argv reaches the program unchanged, never re-parsed
    for path in procs:
        assert path.read_text() == f"{child.pid}\n"  # exec keeps the pid: the program is inside


@pytest.mark.parametrize(
    ("script", "expected", "ends"),
    [
        ("exit 7", 7, 7),
        ("echo hello", 0, 0),
        # the group gets SIGTERM: the program ends as it chooses (a checkpoint), the shell stays
        ("trap 'exit 3' TERM; kill -TERM 0; sleep 5 & wait $!", 3, 3),
        # killed by a signal: recorded as 128 + its number, and the launcher dies of it too
        ("kill -KILL $$", 137, -9),
        ("kill -TERM $$", 143, -15),
    ],
)
def test_the_wrapper_records_the_exit_status_where_asked(
    tmp_path: Path, script: str, expected: int, ends: int
) -> None:
    procs = tmp_path / "cgroup.procs"
    recorded = tmp_path / "job-j1-0.exit"
    job = wanted("job-j1", binding(Mode.DEDICATED, 0), argv=["sh", "-c", script])
    argv = process_argv(job, [str(procs)], exit_file=str(recorded))
    child = subprocess.Popen(argv, start_new_session=True)  # noqa: S603 - /bin/sh, our files
    assert child.wait(timeout=10) == ends  # as the program ended, for the gpuplex that waits
    assert recorded.read_text() == f"{expected}\n"  # what a restarted gpuplex reads
    assert procs.read_text() == f"{child.pid}\n"  # the shell, in the cgroup, is the main pid


def test_the_wrapper_does_not_run_the_command_when_it_cannot_join(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    job = wanted("w", binding(Mode.DEDICATED, 0), argv=["touch", str(ran)])
    argv = process_argv(job, [str(tmp_path / "missing" / "cgroup.procs")])
    done = subprocess.run(argv, capture_output=True, check=False, timeout=10)  # noqa: S603
    assert done.returncode == CGROUP_JOIN_FAILED
    assert not ran.exists()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="dropping to a user needs root"
)
def test_the_wrapper_drops_to_the_tenants_user(tmp_path: Path) -> None:
    procs = tmp_path / "cgroup.procs"
    job = wanted("who", binding(Mode.DEDICATED, 0), argv=["id", "-u"], unix_user="nobody")
    argv = process_argv(job, [str(procs)], (65534, 65534))
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)  # noqa: S603
    out, _ = child.communicate(timeout=10)
    assert (child.returncode, out) == (0, "65534\n")
    assert procs.read_text() == f"{child.pid}\n"


# --- container runtime ------------------------------------------------------------------------------


def option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def served(where: Binding | None = None, **fields: Any) -> WorkloadDesired:
    return wanted(
        "chat",
        where or binding(Mode.DEDICATED, 1),
        tenant="globex",
        replica=2,
        image="vllm/vllm-openai:v0.6",
        argv=["--model", "/models/x", "--port", "8002"],
        port=8002,
        limits=LimitsSpec(cpu_cores=2.5, memory_gib=16, pids=512),
        **fields,
    )


def test_container_argv_isolates_and_limits() -> None:
    argv = container_argv("docker", served(), ["GPU-abc"], {"A": "1"}, "inst1", (1001, 1002))
    assert argv[:2] == ["docker", "run"]
    assert option(argv, "--name") == ["gpuplex-inst1-globex-chat-2"]
    assert "gpuplex.instance=inst1" in option(argv, "--label")
    assert option(argv, "--user") == ["1001:1002"]
    assert option(argv, "--gpus") == ["device=GPU-abc"]
    assert option(argv, "--cpus") == ["2.5"]
    assert option(argv, "--memory") == ["16384m"]
    assert option(argv, "--pids-limit") == ["512"]
    assert "--read-only" in argv
    assert option(argv, "--cap-drop") == ["ALL"]
    assert option(argv, "--security-opt") == ["no-new-privileges"]
    assert option(argv, "--network") == ["gpuplex-inst1-globex"]
    assert option(argv, "--publish") == ["127.0.0.1:8002:8002"]
    assert option(argv, "--env") == ["A=1"]
    assert argv[-5:] == ["vllm/vllm-openai:v0.6", "--model", "/models/x", "--port", "8002"]


def test_container_without_network_publishes_nothing() -> None:
    job = served(network=Network.NONE, unix_user="root")
    argv = container_argv("podman", job, [], {}, "inst1", None)  # the root opt-in
    assert argv[0] == "podman"
    assert option(argv, "--network") == ["none"]
    assert option(argv, "--publish") == []
    assert option(argv, "--gpus") == []
    assert option(argv, "--user") == []


def test_container_with_two_gpus_quotes_the_device_list() -> None:
    argv = container_argv("docker", served(), ["GPU-a", "GPU-b"], {}, "inst1", (1, 1))
    assert option(argv, "--gpus") == ['"device=GPU-a,GPU-b"']


def test_mps_container_shares_ipc_and_the_pipe_directory() -> None:
    share = binding(Mode.MPS, 5, thread_percent=20)
    job = served(where=share)
    env = gpu_environment(job, ["GPU-5"], PIPE)
    argv = container_argv("docker", job, ["GPU-5"], env, "inst1", (1, 1))
    assert option(argv, "--ipc") == ["host"]
    assert option(argv, "--volume") == [f"{PIPE}:{PIPE}"]
    assert f"CUDA_MPS_PIPE_DIRECTORY={PIPE}" in option(argv, "--env")


def test_container_without_image_is_refused() -> None:
    with pytest.raises(ValueError, match="no image"):
        container_argv("docker", wanted("w", binding(Mode.DEDICATED, 0)), ["GPU-a"], {}, "i", None)


def _setup_script(argv: list[str]) -> str:
    after_join = argv[argv.index("--") + 1 :]
    return after_join[after_join.index("/bin/sh") + 2]


#: Paths in a mount script (nothing is made there).
UP, LINK = "/tmp/up", "/tmp/link"  # noqa: S108


def test_granted_folders_are_bound_read_only_from_the_covered_tmp_parents_first() -> None:
    served = wanted("chat", binding(Mode.DEDICATED, 0))
    argv = process_argv(
        served,
        ["/cg/cgroup.procs"],
        (1001, 1002),
        private_tmp=True,
        keep=(f"{UP}/host", "/opt/venv/bin"),  # the state directory inside a granted folder
        read_only=(
            (UP, UP),
            ("/srv/models/base", "/srv/models/base"),
            (LINK, "/data/adapters"),  # a link under /tmp to a folder elsewhere
        ),
    )
    script = _setup_script(argv)
    ro = "mount --no-canonicalize -o remount,bind,ro,nosuid,nodev"
    steps = [
        "exec 3</tmp",  # the host's /tmp, opened before the tmpfs covers it
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /tmp",
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /var/tmp",
        "mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
        f"(umask 066 && mkdir -p {LINK}) && mount --no-canonicalize --bind /data/adapters "
        f"{LINK} && {ro} {LINK}",
        f"(umask 066 && mkdir -p {UP}) && mount --no-canonicalize --bind /proc/self/fd/3/up "
        f"{UP} && {ro} {UP}",
        f"mount --no-canonicalize --bind /srv/models/base /srv/models/base && {ro} "
        "/srv/models/base",
        # gpuplex's own folder inside a granted one, after it: writable again
        f"(umask 066 && mkdir -p {UP}/host) && mount --no-canonicalize --bind "
        f"/proc/self/fd/3/up/host {UP}/host",
        "exec 3<&-",
    ]
    assert script.startswith(" && ".join(steps) + " && ")
    assert "/opt/venv/bin" not in script  # outside the private paths: seen as it is


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mount namespaces need root"
)
def test_a_granted_folder_is_read_only_inside_and_nothing_else_of_tmp_is_there(
    tmp_path: Path,
) -> None:
    granted = tmp_path / "model"
    granted.mkdir()
    (granted / "weights").write_text("w")
    (tmp_path / "other").mkdir()
    script = (
        'cat "$1/weights"; touch "$1/new" 2>/dev/null && echo wrote || echo refused; '
        'ls "$2" 2>/dev/null && echo other-there || echo other-gone'
    )
    job = wanted(
        "probe",
        binding(Mode.DEDICATED, 0),
        argv=["/bin/sh", "-c", script, "probe", str(granted), str(tmp_path / "other")],
    )
    argv = process_argv(job, [], None, private_tmp=True, read_only=((str(granted),) * 2,))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["wrefused", "other-gone"]
    assert not (granted / "new").exists()
