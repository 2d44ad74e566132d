"""The pod template of one planned workload: its container, GPU request, limits, probes, where it may
be scheduled and the security settings every tenant pod runs with.

One template serves every replica of a Deployment or Job, so everything in it must be the same for
those replicas: the GPU request, the planned memory and MPS thread share. `workloads.py` groups the
plan's replicas by exactly these before it asks for a template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuplex.core.plan import Mode
from gpuplex.core.spec.runtime import LimitsSpec
from gpuplex.core.spec.workloads import HealthCheckSpec, WorkloadSpec
from gpuplex.kube.naming import (
    POOL_LABEL_PREFIX,
    POOL_TAINT_KEY,
    SHARING_STRATEGY_LABEL,
    labels,
)

#: Every tenant container runs as this user. One fixed, unprivileged UID also keeps MPS working:
#: the MPS control daemon runs one server per user, so clients of different users on one GPU
#: would queue behind each other instead of sharing it.
POD_USER = 1000
TMP_VOLUME = "tmp"
#: The one writable directory of a read-only root filesystem: a pod-private emptyDir.
TMP_PATH = "/tmp"  # noqa: S108
HTTP_PORT_NAME = "http"
HEALTH_PORT_NAME = "health"

#: GFD's label value for each shared mode: MPS and time-sliced replicas both appear as
#: `nvidia.com/gpu.shared`, so the node's sharing strategy is what sends a pod to the right kind.
SHARING_STRATEGY = {Mode.MPS: "mps", Mode.TIMESLICE: "time-slicing"}


@dataclass(frozen=True, slots=True)
class GpuShare:
    """What the replicas of one Deployment or Job all get from the plan."""

    mode: Mode
    resource: str  # naming.gpu_request: nvidia.com/gpu, nvidia.com/mig-..., nvidia.com/gpu.shared
    count: int
    memory_mib: int
    thread_percent: int | None


def pod_template(
    *,
    tenant: str,
    workload: WorkloadSpec,
    share: GpuShare,
    pool: str | None,
    image: str,
    priority_class: str,
    restart_policy: str,
    extra_labels: dict[str, str],
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    """`spec.template` of the workload's Deployment or Job; `scheduler_name`: gpuplex's second
    scheduler (`kubernetes.scheduler`), else the cluster's default one."""
    spec: dict[str, Any] = {
        "priorityClassName": priority_class,
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": math.ceil(workload.restart.stop_grace_s),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": POD_USER,
            "runAsGroup": POD_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    selector = node_selector(share.mode, pool)
    if selector:
        spec["nodeSelector"] = selector
    if pool is not None:
        spec["tolerations"] = [
            {"key": POOL_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
        ]
    spec["containers"] = [container(workload, share, image)]
    spec["volumes"] = [{"name": TMP_VOLUME, "emptyDir": {}}]
    pod_labels = {**labels(tenant=tenant, workload=workload.name), **extra_labels}
    return {"metadata": {"labels": pod_labels}, "spec": spec}


def node_selector(mode: Mode, pool: str | None) -> dict[str, str]:
    """The pool's node label, and for shared GPUs the sharing strategy the device plugin runs."""
    selector = {}
    if pool is not None:
        selector[POOL_LABEL_PREFIX + pool] = "true"
    if mode in SHARING_STRATEGY:
        selector[SHARING_STRATEGY_LABEL] = SHARING_STRATEGY[mode]
    return selector


def container(workload: WorkloadSpec, share: GpuShare, image: str) -> dict[str, Any]:
    fill = placeholders(workload, share)
    out: dict[str, Any] = {"name": workload.name, "image": image}
    if workload.command:
        out["command"] = [fill_in(arg, fill) for arg in workload.command]
    env = {name: fill_in(value, fill) for name, value in workload.env.items()}
    env.update(mps_environment(share))
    if env:
        out["env"] = [{"name": name, "value": value} for name, value in env.items()]
    ports = container_ports(workload)
    if ports:
        out["ports"] = ports
    out["resources"] = resources(share, workload.limits)
    probe_port = health_port(workload)
    if workload.health is not None and probe_port is not None:
        # readiness first: the startup probe gives it start_timeout_s to answer once; only then
        # do the liveness (and readiness) probes count failures
        out["startupProbe"] = startup_probe(workload.health, probe_port)
        out["readinessProbe"] = probe(workload.health, probe_port)
        out["livenessProbe"] = probe(workload.health, probe_port)
    out["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    out["volumeMounts"] = [{"name": TMP_VOLUME, "mountPath": TMP_PATH}]
    return out


def placeholders(workload: WorkloadSpec, share: GpuShare) -> dict[str, str]:
    """What `{port}`, `{replica}`, `{memory_mib}` and `{thread_percent}` become. Every pod has its
    own address, so each listens on serve.port itself (the host runtime adds the replica index to
    keep replicas on one machine apart); one template serves all replicas, so `{replica}` is 0."""
    return {
        "{port}": str(workload.serve.port) if workload.serve is not None else "",
        "{replica}": "0",
        "{memory_mib}": str(share.memory_mib),
        "{thread_percent}": str(share.thread_percent or 100),
    }


def fill_in(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


def mps_environment(share: GpuShare) -> dict[str, str]:
    """The client's own MPS limits: the device plugin's daemon gives every replica an equal share,
    and a client setting can only narrow it, to what the plan gave this replica."""
    if share.mode is not Mode.MPS:
        return {}
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={share.memory_mib}M"}
    if share.thread_percent is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(share.thread_percent)
    return env


def container_ports(workload: WorkloadSpec) -> list[dict[str, Any]]:
    ports: list[dict[str, Any]] = []
    if workload.serve is not None:
        ports.append(
            {"name": HTTP_PORT_NAME, "containerPort": workload.serve.port, "protocol": "TCP"}
        )
    check = health_port(workload)
    if check is not None and all(port["containerPort"] != check for port in ports):
        ports.append({"name": HEALTH_PORT_NAME, "containerPort": check, "protocol": "TCP"})
    return ports


def health_port(workload: WorkloadSpec) -> int | None:
    """The port the health check calls: its own, else the serving port, else none (no probe)."""
    if workload.health is None:
        return None
    if workload.health.port is not None:
        return workload.health.port
    return workload.serve.port if workload.serve is not None else None


def probe(health: HealthCheckSpec, port: int) -> dict[str, Any]:
    """An HTTP probe from the health check. Kubernetes counts whole seconds, at least one."""
    return {
        "httpGet": {"path": health.http_path, "port": port},
        "periodSeconds": max(1, math.ceil(health.interval_s)),
        "timeoutSeconds": max(1, math.ceil(health.timeout_s)),
        "failureThreshold": health.failure_threshold,
    }


def startup_probe(health: HealthCheckSpec, port: int) -> dict[str, Any]:
    """Kubernetes' form of `start_timeout_s`: the probe may fail for that long (in whole periods)
    before the container is restarted; the other probes wait until it has passed once."""
    period_s = max(1, math.ceil(health.interval_s))
    return {
        **probe(health, port),
        "failureThreshold": max(1, math.ceil(health.start_timeout_s / period_s)),
    }


def resources(share: GpuShare, limits: LimitsSpec) -> dict[str, dict[str, str]]:
    """The GPU resource, with requests equal to limits as extended resources require; CPU and memory
    from the workload's limits, requested in full, since the plan counted them as taken. What the
    workload leaves out comes from the namespace's LimitRange defaults."""
    wanted = {share.resource: str(share.count)}
    if limits.cpu_cores is not None:
        wanted["cpu"] = cpu_quantity(limits.cpu_cores)
    if limits.memory_gib is not None:
        wanted["memory"] = memory_quantity(limits.memory_gib)
    return {"requests": dict(wanted), "limits": dict(wanted)}


def cpu_quantity(cores: float) -> str:
    """`2`, `500m`: whole cores where exact, else millicores (at least one)."""
    millicores = max(1, round(cores * 1000))
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_quantity(gib: float) -> str:
    """`64Gi`, `1536Mi`: whole GiB where exact, else MiB (at least one)."""
    mib = max(1, round(gib * 1024))
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
